"""The one exception family of hermes-stack. `cli.main()` catches `HermesError` once and prints one line per problem."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input, phrased as: file, key, found, expected, hint."""

    file: str
    key: str
    found: str
    expected: str
    hint: str = ""

    def line(self) -> str:
        text = f"{self.file}: {self.key}: found {self.found}, expected {self.expected}"
        return f"{text}. Hint: {self.hint}" if self.hint else text


class HermesError(Exception):
    """Base of every error the controller reports to the user. exit_code 2 = bad input, 1 = runtime failure."""

    exit_code = 1

    def lines(self) -> list[str]:
        return [str(self)]


class InputError(HermesError):
    """Bad input (config, key file, CLI arguments): exit 2, nothing started."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str):
        self.problems = [problems] if isinstance(problems, Problem) else problems
        super().__init__("; ".join(self.lines()))

    def lines(self) -> list[str]:
        if isinstance(self.problems, str):
            return [self.problems]
        return [p.line() for p in self.problems]


class StackError(HermesError):
    """A runtime failure of the stack (docker, a service, a health check): exit 1."""

    exit_code = 1
