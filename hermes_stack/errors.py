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
        # The file is shortened too: a path of thousands of characters (a name the system refused) is not echoed whole.
        text = f"{shorten(self.file)}: {self.key}: found {shorten(self.found)}, expected {self.expected}"
        return f"{text}. Hint: {self.hint}" if self.hint else text


# A found text is echoed at most this long (paths included): a pasted blob must not become a 6,000-character line.
FOUND_WIDTH = 240
# Problems shown per file (the README's cap); the rest are counted on one more line.
PER_FILE_CAP = 10


def shorten(text: str, width: int = FOUND_WIDTH) -> str:
    """`text`, or its start with an ellipsis and the whole length: `"aaaa…" (6000 characters)`."""
    if len(text) <= width:
        return text
    return f"{text[: width - 20]}… ({len(text)} characters)"


def near_miss(name: str, names: list[str]) -> str | None:
    """The one existing name `name` misspells, for a "did you mean": the same ignoring case and - vs _, else the
    closest by difflib; None when `name` exists or nothing is close."""
    import difflib

    def norm(text: str) -> str:
        return text.lower().replace("_", "-")

    if name in names:  # it exists (twice, or with a broken import, perhaps: the caller says which)
        return None
    same = [n for n in names if norm(n) == norm(name)]
    if same:
        return same[0]
    close = difflib.get_close_matches(norm(name), [norm(n) for n in names], n=1, cutoff=0.75)
    return next((n for n in names if close and norm(n) == close[0]), None)


def capped(problems: list[Problem], cap: int = PER_FILE_CAP) -> list[Problem]:
    """At most `cap` problems per file (file:line:col counts as its file), then one line counting the rest."""
    shown: list[Problem] = []
    rest: dict[str, int] = {}
    seen: dict[str, int] = {}
    for p in problems:
        base = p.file.split(":", 1)[0] if p.file != "command line" else p.file
        seen[base] = seen.get(base, 0) + 1
        if seen[base] <= cap:
            shown.append(p)
        else:
            rest[base] = rest.get(base, 0) + 1
    shown += [Problem(base, "(more)", f"{n} more problem{'s' if n != 1 else ''} in this file",
                      f"at most {cap} shown per file", "fix the ones above and run validate again")
              for base, n in rest.items()]
    return shown


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
        return [p.line() for p in capped(self.problems)]


class StackError(HermesError):
    """A runtime failure of the stack (docker, a service, a health check): exit 1."""

    exit_code = 1
