"""The Makefile's variables are checked before the controller runs (issue 25): an empty ALGO or DEVICE would reach
the CLI as a missing option value, and a variable in the wrong case (algo=ppo) would be ignored, silently running
the default. `make -n` parses the Makefile (where the checks live) without running a target."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
# As a user's shell runs make: under `make test` the tests inherit MAKELEVEL and MAKEFLAGS, and a make started from
# another make (MAKELEVEL > 0) lets its parent's variables through unchecked.
USER_ENV = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-n", "-s", "help", *args], cwd=ROOT, env=USER_ENV, capture_output=True, text=True, timeout=60,
                          check=False)


def stop_line(done: subprocess.CompletedProcess) -> str:
    """The one error line, without make's `Makefile:N: *** ` and `.  Stop.` frame."""
    (line,) = [x for x in done.stderr.splitlines() if "***" in x]
    return line.split("*** ", 1)[1].removesuffix("  Stop.").removesuffix(".")


@pytest.mark.parametrize("arg,line", [
    ("algo=ppo", ("algo=ppo: found a variable in the wrong case, expected ALGO=ppo. Hint: make variables are "
                  "case-sensitive; algo would be ignored and the default used")),
    ("Device=cpu", ("Device=cpu: found a variable in the wrong case, expected DEVICE=cpu. Hint: make variables are "
                    "case-sensitive; Device would be ignored and the default used")),
    ("ALGO=", ("ALGO: found an empty value, expected ALGO=ppo or ALGO=grpo. Hint: leave ALGO out for the default, "
               "grpo")),
    ("DEVICE=", ("DEVICE: found an empty value, expected DEVICE=auto, cpu or gpu. Hint: leave DEVICE out for the "
                 "default, auto")),
    ("DEVICE=tpu", ("DEVICE=tpu: found a device hermes-stack does not know, expected DEVICE=auto, cpu or gpu. Hint: "
                    "auto picks gpu when nvidia-smi finds one and Docker can use it (NVIDIA Container Toolkit)")),
    ("VOLUMES=yes", ("VOLUMES=yes: found a value make down does not know, expected VOLUMES=1 (delete the "
                     "checkpoints) or VOLUMES=0. Hint: leave VOLUMES out to keep them")),
    ("ALGO=ppo grpo", ("ALGO=ppo grpo: found 2 algorithms, expected one: ALGO=ppo or ALGO=grpo. Hint: one stack per "
                       "make up; run the other in a second checkout")),
    ("REPLICAS=two", ("REPLICAS=two: found a value that is no number of replicas, expected REPLICAS=1, 2, ... Hint: "
                      "leave REPLICAS out for settings inference.replicas")),
    ("REPLICAS=0", ("REPLICAS=0: found a value that is no number of replicas, expected REPLICAS=1, 2, ... Hint: "
                    "leave REPLICAS out for settings inference.replicas")),
    # a quote used to break the check's own shell line first (bash: unexpected EOF), a second line before make's
    ("UNLOCK=yes", ("UNLOCK=yes: found a value make up does not know, expected UNLOCK=1 (locked settings may change) "
                    "or UNLOCK=0. Hint: leave UNLOCK out to keep them locked")),
    ("REPLICAS=2'", ("REPLICAS=2': found a value that is no number of replicas, expected REPLICAS=1, 2, ... Hint: "
                     "leave REPLICAS out for settings inference.replicas")),
    ("REPLICAS=01", ("REPLICAS=01: found a value that is no number of replicas, expected REPLICAS=1, 2, ... Hint: "
                     "leave REPLICAS out for settings inference.replicas")),
    ("REPLICAS=1 2", ("REPLICAS=1 2: found a value that is no number of replicas, expected REPLICAS=1, 2, ... Hint: "
                      "leave REPLICAS out for settings inference.replicas")),
])
def test_a_bad_make_variable_is_one_line_exit_2_before_the_controller(arg, line):
    done = make(arg)
    assert done.returncode == 2
    assert stop_line(done) == line
    assert [x for x in done.stderr.splitlines() if x.strip()] == [x for x in done.stderr.splitlines() if "***" in x]
    assert "hermes_stack" not in done.stdout  # nothing was dispatched


@pytest.mark.parametrize("args", [(), ("ALGO=ppo",), ("ALGO=grpo", "DEVICE=cpu", "MODEL="), ("VOLUMES=1",),
                                  ("REPLICAS=2",), ("REPLICAS=",)])
def test_good_make_variables_pass(args):
    done = make(*args)
    assert done.returncode == 0, done.stderr


def dispatched(*args: str) -> str:
    done = subprocess.run(["make", "-n", "-s", *args], cwd=ROOT, env=USER_ENV, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if "-m hermes_stack" in x]
    return shlex.split(line.split("-m hermes_stack", 1)[1])  # the words the shell hands the controller


@pytest.mark.parametrize("target", ["status", "report", "down"])
def test_the_running_stack_commands_leave_the_algorithm_to_the_last_up_unless_algo_is_given(target):
    # `make up ALGO=ppo` then `make logs SERVICE=trainer` must show the PPO stack: the controller picks the last
    # `up`'s algorithm when no --algo comes (stack_state.stack_algo); a given ALGO still wins.
    assert "--algo" not in dispatched(target)
    assert dispatched(target, "ALGO=ppo")[1:3] == ["--algo", "ppo"]


def test_logs_and_down_pass_what_was_asked():
    assert dispatched("logs", "SERVICE=trainer") == ["logs", "trainer"]
    assert dispatched("down", "VOLUMES=0") == ["down"]
    assert dispatched("down", "VOLUMES=1", "ALGO=grpo") == ["down", "--algo", "grpo", "--volumes"]



@pytest.mark.parametrize("value", ["a'b", "two words", 'say "hi"', "a;b", "`x`"])
def test_a_quote_or_space_in_model_or_service_reaches_the_controller_as_one_word(value):
    """The recipe quotes what the user typed: a quote or a space used to end in the shell's own syntax error (or
    typer's "unexpected extra argument") instead of the controller's line naming the value."""
    assert dispatched("validate", f"MODEL={value}")[-2:] == ["--model", value]
    assert dispatched("logs", f"SERVICE={value}")[-1] == value


def test_unlock_1_is_the_controllers_unlock_for_the_targets_that_validate():
    """The locked-setting hint said "pass --unlock", which make refuses as its own option; UNLOCK=1 is its way."""
    for target in ("validate", "up", "dry-run", "render"):
        assert dispatched(target, "UNLOCK=1")[-1] == "--unlock"
        assert "--unlock" not in dispatched(target, "UNLOCK=0")


VARS = "ALGO, DEVICE, MODEL, SERVICE, VOLUMES, PYTHON, REPLICAS, UNLOCK"


@pytest.mark.parametrize("arg,hint", [("VOLUME=1", "did you mean VOLUMES?"), ("MODLE=smollm2-135m", "did you mean MODEL?"),
                                      ("REPLICA=2", "did you mean REPLICAS?"),
                                      ("SERVICES=trainer", "did you mean SERVICE?"),
                                      ("FOO=1", "an environment variable goes before make: FOO=... make <target>")])
def test_a_variable_make_does_not_know_is_refused_before_anything_runs(arg, hint):
    """`make down VOLUME=1` stopped the stack and kept the volumes; `make up REPLICA=2` started one replica."""
    done = subprocess.run(["make", "-n", "-s", "down", arg], cwd=ROOT, env=USER_ENV, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "hermes_stack" not in done.stdout
    assert stop_line(done) == (f"{arg}: found a variable make does not know, expected one of {VARS}. Hint: {hint}"
                               .removesuffix("."))


@pytest.mark.parametrize("goals,word,hint", [(["up", "ppo"], "ppo", "did you mean ALGO=ppo?"),
                                             (["logs", "trainer"], "trainer", "did you mean SERVICE=trainer?"),
                                             (["down", "grpo"], "grpo", "did you mean ALGO=grpo?"),
                                             (["up", "gpu"], "gpu", "did you mean DEVICE=gpu?"),
                                             (["stauts"], "stauts", "make help lists the targets")])
def test_a_word_where_a_setting_belongs_runs_no_target(goals, word, hint):
    """`make up ppo` ran `up` in full with ALGO=grpo (a training run), then said there was no rule for `ppo`."""
    done = subprocess.run(["make", "-n", "-s", *goals], cwd=ROOT, env=USER_ENV, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "hermes_stack" not in done.stdout
    line = stop_line(done)
    assert line.startswith(f"{word}: found a word make does not know as a target, expected a target (help, venv, ")
    assert line.endswith(f"and VAR=value settings. Hint: {hint}".removesuffix("."))


def test_the_known_goals_are_the_makefiles_targets():
    import re

    text = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-z][a-z-]*):.*## ", text, flags=re.MULTILINE)
    (goals,) = re.findall(r"^MAKE_GOALS := (.*)$", text, flags=re.MULTILINE)
    assert sorted(goals.split()) == sorted(targets)


@pytest.mark.parametrize("args", [("status", "HERMES_PROJECT_NAME=x"), ("test-unit", "PYTEST_ADDOPTS=-x"),
                                  ("test-unit", "CI=1", "MAKELEVEL=1"), (".venv/.installed",)])
def test_what_passed_through_before_still_does(args):
    """The controller's HERMES_* and pytest's PYTEST_* on make's command line reach the recipe's environment, a
    parent make's variables reach a sub-make (MAKELEVEL > 0), and the venv's stamp is a file make can be asked for."""
    done = subprocess.run(["make", "-n", "-s", *args], cwd=ROOT, env=USER_ENV, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
