"""A run's data belongs to its checkout (issue 25): two checkouts on one machine both default to the compose project
`hermes-<algo>` and so to its volume. Without a check, a second checkout's `up` resumed from the first one's
checkpoints (another experiment's weights) and its `down VOLUMES=1` deleted them.

The data volume carries the checkout that created it (label CHECKOUT_LABEL, from $HERMES_CHECKOUT, which `up` sets:
compose.base.yml); the stack's containers carry compose's own working-directory label. `up` and `down --volumes` in
another checkout are refused with one line naming the directory that owns the run and the command that runs this
checkout's stack beside it. `docker compose` typed in the project directory keeps working: nothing about the
project name changes. A volume without the label (made before it existed) is adopted as before.

`owner_problem` is the pure decision; `probe_owners` asks Docker (read-only) through the preflight's probe.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from hermes_stack.errors import Problem

CHECKOUT_ENV = "HERMES_CHECKOUT"
CHECKOUT_LABEL = "io.hermes-stack.checkout"
DATA_VOLUME = "hermes-data"


def this_checkout(root: Path) -> str:
    return str(root.resolve())


def owner_problem(project: str, algo: str, ours: str, volume_owner: str | None, container_dirs: Sequence[str],
                  action: str = "up") -> Problem | None:
    """Problem when the project's volume or containers belong to another checkout than `ours`, else None."""
    others = [d for d in (volume_owner, *container_dirs) if d and Path(d) != Path(ours)]
    if not others:
        return None
    other = others[0]
    slug = re.sub(r"[^a-z0-9_-]+", "-", Path(ours).name.lower()).strip("-_") or "copy"
    beside = f"`HERMES_PROJECT_NAME={project}-{slug} make up ALGO={algo}` runs this checkout's own stack beside it"
    if action == "down":
        return Problem(f"{project} (data volume {project}_{DATA_VOLUME})", "checkout", f"the run of {other}",
                       f"a volume of this checkout ({ours}) to delete",
                       f"`make down ALGO={algo} VOLUMES=1` deletes only this checkout's run; run it in {other} to "
                       "delete that one")
    return Problem(f"{project} (data volume {project}_{DATA_VOLUME})", "checkout", f"the run of {other}",
                   f"a run of this checkout ({ours})",
                   f"{beside} (its own volume); `make down ALGO={algo}` in {other} stops that one")


def probe_owners(project: str, run: Callable[[Sequence[str]], tuple[int, str, str]] | None = None
                 ) -> tuple[str | None, list[str]]:
    """(the volume's checkout label or None, the working directories of the project's containers)."""
    if run is None:
        from hermes_stack.compose import probe as run
    rc, out, _ = run(["docker", "volume", "inspect", f"{project}_{DATA_VOLUME}", "--format",
                      f'{{{{index .Labels "{CHECKOUT_LABEL}"}}}}'])
    volume_owner = out.strip() if rc == 0 and out.strip() not in ("", "<no value>") else None
    rc, out, _ = run(["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={project}", "--format",
                      '{{.Label "com.docker.compose.project.working_dir"}}'])
    dirs = sorted({line.strip() for line in out.splitlines() if line.strip()}) if rc == 0 else []
    return volume_owner, dirs


def check_owner(project: str, algo: str, root: Path, action: str = "up", run=None) -> Problem | None:
    volume_owner, dirs = probe_owners(project, run)
    return owner_problem(project, algo, this_checkout(root), volume_owner, dirs, action)
