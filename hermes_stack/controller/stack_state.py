"""What the controller keeps between commands, and which stack a command talks to.

- `.hermes/` (gitignored): the plan of the last `up` (so `logs`/`status`/`down` reach the same stack) and the
  inference key generated offline (0600).
- `.env` in the project directory, written by `up`: compose reads COMPOSE_FILE / COMPOSE_PROJECT_NAME from it, so a
  hand-typed `docker compose logs trainer` (ps, exec, down) talks to the running stack. Never a secret.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hermes_stack.controller.compose import Compose

STATE_DIR = Path(".hermes")
LAST_UP = "last-up.json"
KEY_FILE = "inference.key"
SALT_FILE = "secrets.salt"


@dataclass(frozen=True)
class Plan:
    algo: str
    device: str
    files: tuple[str, ...]
    project: str | None = None  # HERMES_PROJECT_NAME at `up` (None: the `name:` in compose.<algo>.yml)


def project_root() -> Path:
    """The project directory the controller works in: $HERMES_ROOT, else the current directory."""
    return Path(os.environ.get("HERMES_ROOT") or Path.cwd())


def plan_compose(plan: Plan, env: dict[str, str] | None = None, echo: bool = True) -> Compose:
    """The Compose runner for a plan's stack; `echo` logs every command before it runs."""
    from hermes_stack.controller import console
    from hermes_stack.controller.compose import Compose, stack_params

    params = stack_params(plan.algo, plan.device, project_root(), env=env, files=plan.files,
                          project_name=plan.project)
    return Compose(params, echo=(lambda cmd: console.info(f"$ {cmd}")) if echo else None)


# ---- .hermes/ ---------------------------------------------------------------------------------------------------------

def inference_key(state_dir: Path, from_keyfile: str | None) -> str:
    """The key protecting the inference service: the key file's value, else one generated once and kept 0600."""
    if from_keyfile:
        return from_keyfile
    return _made_once(state_dir / KEY_FILE, lambda: "hs-" + secrets.token_urlsafe(24), bool)


def secrets_salt(state_dir: Path) -> bytes:
    """The salt of the secrets' digest label (compose_env.secrets_digest): made once, kept 0600. A new one (after
    .hermes/ was deleted) recreates the containers once, as the new internal key made then needs anyway."""
    return _made_once(state_dir / SALT_FILE, lambda: secrets.token_hex(16), lambda text: len(text) >= 32).encode()


def _made_once(path: Path, make: Callable[[], str], valid: Callable[[str], bool]) -> str:
    """The value kept at `path` (0600), made when there is none that is `valid`. Two commands making it at once
    (`up` beside `render`) end with the same value: it is written whole to a file of this process, then linked into
    place only if none is there yet; a reader never sees it half written."""
    text = _kept(path)
    if valid(text):
        return text
    path.parent.mkdir(parents=True, exist_ok=True)
    made = make()
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600
    mine = Path(name)
    with os.fdopen(fd, "w") as fh:
        fh.write(made + "\n")
    try:
        os.link(mine, path)
    except FileExistsError:  # another command made one meanwhile (kept), or an unusable one is there (replaced)
        kept = _kept(path)
        if valid(kept):
            return kept
        os.replace(mine, path)
    finally:
        mine.unlink(missing_ok=True)
    return made


def _kept(path: Path) -> str:
    """The value kept at `path`, stripped; "" when there is none."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def stored_inference_key(state_dir: Path) -> str | None:
    """The key `up` generated offline (read-only: nothing is generated here), for test-inference."""
    return _kept(state_dir / KEY_FILE) or None


def plan_file(algo: str) -> str:
    """Each algorithm's own record: a GRPO and a PPO stack can run side by side, and one record (the last up's) sent
    `status`, `logs` and `down` of the other to a default plan without its replicas, device or -f files."""
    return f"plan-{algo}.json"


def save_plan(state_dir: Path, plan: Plan) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"algo": plan.algo, "device": plan.device, "files": plan.files, "project": plan.project})
    (state_dir / plan_file(plan.algo)).write_text(text)
    (state_dir / LAST_UP).write_text(text)


def last_up_algo(state_dir: Path) -> str | None:
    """The algorithm of the last `up` in this checkout (None before any): what `status`, `logs`, `down` and `report`
    talk to when no --algo is given, so `make logs SERVICE=trainer` after `make up ALGO=ppo` shows the PPO stack."""
    try:
        algo = json.loads((state_dir / LAST_UP).read_text()).get("algo")
    except (OSError, ValueError, AttributeError):
        return None
    # A hand-edited or corrupted state file is ignored, not blamed on an --algo the user never passed.
    return algo if algo in ("ppo", "grpo") else None


def stack_algo(state_dir: Path, algo: str | None) -> str:
    """--algo as given, else the last `up`'s, else grpo (the default everywhere else)."""
    return algo or last_up_algo(state_dir) or "grpo"


def saved_plan(state_dir: Path, algo: str) -> Plan | None:
    """The files (and project) the last `up` of this algo used; None when none is recorded. Its own record first,
    then the last up's (the one record a checkout kept before)."""
    for name in (plan_file(algo), LAST_UP):
        if (plan := saved_plan_in(state_dir / name, algo)) is not None:
            return plan
    return None


def saved_plan_in(path: Path, algo: str) -> Plan | None:
    """The plan of `algo` recorded in `path`, or None (no file, another algorithm, a record `up` could not write)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    # Only a record `up` could have written: a string for files would be split into one -f per character.
    if isinstance(data, dict) and data.get("algo") == algo and data.get("device") in ("cpu", "gpu") \
            and isinstance(data.get("files"), list) and data["files"] and all(
                isinstance(f, str) and f for f in data["files"]) \
            and isinstance(data.get("project") or "", str):
        return Plan(algo, data["device"], tuple(data["files"]), data.get("project") or None)
    return None


def forget_plan(state_dir: Path, algo: str, project: str) -> None:
    """After `down --volumes` of `project`: its run is gone, so this algorithm's commands go back to the default
    stack. The plan of a `HERMES_PROJECT_NAME=hermes-grpo-2` run kept sending `make status ALGO=grpo` to that
    deleted stack, not to the hermes-grpo run on its kept volume."""
    for name in (plan_file(algo), LAST_UP):
        saved = saved_plan_in(state_dir / name, algo)
        if saved is not None and (saved.project or f"hermes-{algo}") == project:
            (state_dir / name).unlink(missing_ok=True)


def load_plan(state_dir: Path, algo: str) -> Plan:
    """The plan of the last `up` of this algo, so `logs`/`status`/`down` talk to the same stack; else the default."""
    return saved_plan(state_dir, algo) or Plan(algo, "gpu", (f"compose.{algo}.yml",))


# ---- .env -------------------------------------------------------------------------------------------------------------
# Only values that are not secret: the internal inference key stays in .hermes/inference.key (0600) and reaches
# compose through the controller's process environment; interpolation of it in a hand-typed command gives "" (logs,
# ps, exec and down do not use it).
DOTENV = ".env"
DOTENV_MARK = "# hermes-stack: written by `hermes-stack up` for the running stack"
DOTENV_PASSTHROUGH = ("HERMES_IMAGE_REPO",)  # non-secret selectors of the controller's own environment


def dotenv_names(root: Path, project: str) -> bool:
    """Our .env is there and names `project`: a plain `docker compose logs` typed here reaches that stack."""
    try:
        text = (root / DOTENV).read_text(errors="replace")
    except OSError:
        return False
    return text.startswith(DOTENV_MARK) and f"\nCOMPOSE_PROJECT_NAME={project}\n" in text


def remove_dotenv(root: Path, project: str) -> bool:
    """After `down`: remove our .env when it names the stack just stopped (a user's own .env is never touched)."""
    if not dotenv_names(root, project):
        return False
    (root / DOTENV).unlink()
    return True


def dotenv_text(plan: Plan, project: str, env: dict[str, str]) -> str:
    """The .env content for the running stack (pure). Never a secret: only names listed here are written."""
    lines = [DOTENV_MARK, "# (no secrets here; `make down` removes it, the next `make up` writes it again)",
             f"COMPOSE_FILE={':'.join(plan.files)}", f"COMPOSE_PROJECT_NAME={project}"]
    # The secrets' digest too (a salted HMAC, already in `docker inspect` as a label): without it a typed `docker
    # compose up` saw every service's label change and recreated the whole stack before failing on the secrets.
    for name in ("HERMES_ATROPOS_PORT", "HERMES_INFERENCE_PORT", "HERMES_SERVED_MODEL_NAME", "HERMES_SECRETS_DIGEST"):
        if env.get(name):
            lines.append(f"{name}={env[name]}")
    for name in DOTENV_PASSTHROUGH:
        if os.environ.get(name):
            lines.append(f"{name}={os.environ[name]}")
    return "\n".join(lines) + "\n"


def write_dotenv(root: Path, plan: Plan, project: str, env: dict[str, str]) -> bool:
    """Write .env unless the user has one of their own (then nothing is touched). True when written."""
    path = root / DOTENV
    if path.exists() and not path.read_text(errors="replace").startswith(DOTENV_MARK):
        return False
    tmp = path.with_name(".env.hermes-tmp")
    tmp.write_text(dotenv_text(plan, project, env))
    os.replace(tmp, path)
    return True
