"""A run's data belongs to its checkout (issue 25): two checkouts on one machine both default to the compose project
`hermes-<algo>` and so to its volume. Without a check, a second checkout's `up` resumed from the first one's
checkpoints (another experiment's weights) and its `down VOLUMES=1` deleted them.

The owner is recorded in a marker volume `<project>_checkout` (label CHECKOUT_LABEL = the checkout's directory) that
`up` creates and `down --volumes` removes, beside compose's own; the stack's containers carry compose's
working-directory label. Not a label on the data volume itself: compose 2.40 compares a volume's definition with the
config hash it recorded and asks "Recreate (data will be lost)?" when it changed, which a per-checkout label would
do for every existing volume and for `docker compose` typed without it. `up` and `down --volumes` in another checkout
are refused with one line naming the directory that owns the run and the command that runs this checkout's stack
beside it. Typed `docker compose` is untouched. A data volume without a marker (made before markers existed) is
adopted, as before.

`owner_problem` is the pure decision; Docker is asked (read-only) through the preflight's probe.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from hermes_stack import run_identity as ri
from hermes_stack.errors import Problem

CHECKOUT_LABEL = "io.hermes-stack.checkout"
DATA_VOLUME = "hermes-data"


# A second stack beside a running one needs its own host ports as well (both checkouts' configs name the same).
OWN = "its own volume; while that one runs, other host ports too: [atropos] api_port, inference.port"


def marker(project: str) -> str:
    return f"{project}_checkout"


def this_checkout(root: Path) -> str:
    return str(root.resolve())


def owner_problem(project: str, algo: str, ours: str, volume_owner: str | None, container_dirs: Sequence[str],
                  action: str = "up", exists: Callable[[str], bool] = os.path.isdir) -> Problem | None:
    """Problem when the project's run or containers belong to another checkout than `ours`, else None. A checkout
    that no longer exists owns nothing (its run is adopted)."""
    others = [d for d in (volume_owner, *container_dirs) if d and Path(d) != Path(ours) and exists(d)]
    if not others:
        return None
    other = others[0]
    slug = re.sub(r"[^a-z0-9_-]+", "-", Path(ours).name.lower()).strip("-_") or "copy"
    beside = f"`HERMES_PROJECT_NAME={project}-{slug} make up ALGO={algo}` runs this checkout's own stack beside it"
    if action == "stop":  # `down` without --volumes: the other checkout's running stack is not this one's to stop
        return Problem(f"{project} (data volume {project}_{DATA_VOLUME})", "checkout", f"the run of {other}",
                       f"a stack of this checkout ({ours}) to stop",
                       f"run `{ri.make_for(project, algo, 'down')}` in {other} to stop that one; {beside} ({OWN})")
    if action == "down":
        return Problem(f"{project} (data volume {project}_{DATA_VOLUME})", "checkout", f"the run of {other}",
                       f"a volume of this checkout ({ours}) to delete",
                       f"`{ri.make_for(project, algo, 'down')} VOLUMES=1` deletes only this checkout's run; run it "
                       f"in {other} to delete that one")
    return Problem(f"{project} (data volume {project}_{DATA_VOLUME})", "checkout", f"the run of {other}",
                   f"a run of this checkout ({ours})",
                   f"{beside} ({OWN}); `{ri.make_for(project, algo, 'down')}` in {other} stops that one")


def probe_owners(project: str, run: Callable[[Sequence[str]], tuple[int, str, str]] | None = None
                 ) -> tuple[str | None, list[str]]:
    """(the checkout the project's marker names, or None; the working directories of the project's containers)."""
    run = run or _probe()
    rc, out, _ = run(["docker", "volume", "inspect", marker(project), "--format",
                      f'{{{{index .Labels "{CHECKOUT_LABEL}"}}}}'])
    volume_owner = out.strip() if rc == 0 and out.strip() not in ("", "<no value>") else None
    rc, out, _ = run(["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={project}", "--format",
                      '{{.Label "com.docker.compose.project.working_dir"}}'])
    dirs = sorted({line.strip() for line in out.splitlines() if line.strip()}) if rc == 0 else []
    return volume_owner, dirs


def check_owner(project: str, algo: str, root: Path, action: str = "up", run=None,
                exists: Callable[[str], bool] = os.path.isdir) -> Problem | None:
    volume_owner, dirs = probe_owners(project, run)
    return owner_problem(project, algo, this_checkout(root), volume_owner, dirs, action, exists)


def claim(project: str, root: Path, run=None) -> None:
    """Record this checkout as the run's owner (after the checks passed): a marker naming another (gone) checkout is
    replaced, this checkout's is kept."""
    run = run or _probe()
    owner, _ = probe_owners(project, run)
    if owner == this_checkout(root):
        return
    if owner is not None:
        run(["docker", "volume", "rm", "-f", marker(project)])
    run(["docker", "volume", "create", "--label", f"{CHECKOUT_LABEL}={this_checkout(root)}", marker(project)])


def release(project: str, run=None) -> None:
    """The run's data is gone (down --volumes): so is its owner."""
    (run or _probe())(["docker", "volume", "rm", "-f", marker(project)])


def _probe():
    from hermes_stack.controller.compose import probe

    return probe
