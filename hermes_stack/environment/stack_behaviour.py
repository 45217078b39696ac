"""What every environment the stack runs does the same way, the built-in one and a user's BaseEnv file alike:
the readiness marker from registration on, registering again when Atropos forgot it, leaving once the trainer has
trained its last step, groups returned as None counted and logged (upstream files return None for a group
whose scores are all equal), and an exception in collect_trajectories said once with its type and place, then
counted (atroposlib logged only `Error in collect_trajectories: <str(exc)>`, e.g. `'expected'` for a KeyError, for
every item, several times a second).

A mixin placed before the environment's own class (`class Run(StackBehaviour, UserEnv)`), so its methods wrap the
environment's through `super()`.
"""

from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path

from hermes_stack.health import write_marker
from hermes_stack.modelcore.weights_layout import POLICY_STEP_KEY, read_served_step

log = logging.getLogger("hermes_stack.environment")


class TrainerFinished(Exception):
    """The trainer has trained (and pushed) its last step: the environment's serve loop ends (environment/__main__)."""


class StackBehaviour:
    ready_marker: Path | None = None
    ready_dir: str | None = None  # $HERMES_DATA_DIR; else the config's data_dir (HermesEnvConfig has one)
    none_groups: int = 0
    failed_items: int = 0
    failed_before_success: int = 0  # failed_items at the last group returned: a success after failures says so
    trainer_steps: int | None = None  # [trainer] num_steps, kept when config.total_steps is lifted (get_status)

    @property
    def tags_policy_step(self) -> bool:
        """True where the environment tags its groups itself, right before it samples (the built-in one's inference
        rollouts): the served step is then not read a second time for each chunk here."""
        return False

    async def register_env(self):
        await super().register_env()
        if data_dir := self._data_dir():
            self.ready_marker = write_marker(Path(data_dir), "environment", env_id=getattr(self, "env_id", None))
        log.info("registered with Atropos at %s (env_id %s); ready", self.config.rollout_server_url,
                 getattr(self, "env_id", None))

    async def get_status(self):
        """atroposlib's /status-env poll; when it fails (Atropos restarted and forgot this environment: its env_id
        is unknown, or it was reset), register again in this process instead of crashing the service. If Atropos
        stays unreachable, registering fails after atroposlib's retries and the service restarts (compose)."""
        try:
            await super().get_status()
        except Exception as exc:  # noqa: BLE001 - tenacity.RetryError around aiohttp/KeyError causes
            log.warning("atropos: /status-env for env_id %s failed (%s); atropos restarted or reset? registering "
                        "again", getattr(self, "env_id", None), type(exc).__name__)
            await self.register_env()
            await super().get_status()
        self._leave_when_trainer_finished()

    def _leave_when_trainer_finished(self) -> None:
        """atroposlib's loop leaves once Atropos' step plus the batches queued pass total_steps. Atropos' step counts
        the batches handed out, and the trainer hands some back unused (a batch whose every group lags the policy
        past max_staleness), so that guess can leave a trainer waiting for a batch no environment will send. Where
        the trainer writes the step it pushed (weights/served-step on the data volume, after every step), the
        environment stays until that step reaches total_steps instead; elsewhere upstream's rule stands."""
        data_dir = self._data_dir()
        if not data_dir:
            return
        trained = read_served_step(Path(data_dir) / "weights")
        if not trained:  # no push yet (or no trainer writing one): upstream's rule
            return
        if self.trainer_steps is None:
            self.trainer_steps = self.config.total_steps
        if trained >= self.trainer_steps:
            raise TrainerFinished(trained)
        self.config.total_steps = sys.maxsize  # upstream's guess off: the trainer's own step decides

    def _log_failure(self, exc: Exception) -> None:
        """The first failure with its traceback; then the 10th, 100th and every 500th, each with its place and the
        count, so `make status` and `make up` (status.last_error) quote the cause, not a bare `'expected'`."""
        n = self.failed_items
        if n == 1:
            log_traceback(exc)
        if n == 1 or n in (10, 100) or n % 500 == 0:
            log.error("collect_trajectories raised %s: %s at %s (%d item(s) so far; each is skipped)",
                      type(exc).__name__, exc, raised_at(exc), n)

    def _data_dir(self) -> str | None:
        return self.ready_dir or getattr(getattr(self, "config", None), "data_dir", None)

    async def collect_trajectories(self, item):
        # The weights step served when this generation begins, for groups the environment does not tag itself (a
        # user's file): the trainer bounds staleness by it; untagged groups passed unbounded ("staleness=nan").
        data_dir = self._data_dir()
        served = read_served_step(Path(data_dir) / "weights") if data_dir and not self.tags_policy_step else None
        try:
            result = await super().collect_trajectories(item)
        except Exception as exc:  # noqa: BLE001 - atroposlib's handle_env catches it the same way and skips the item
            self.failed_items += 1
            self._log_failure(exc)
            return None, []
        group = result[0] if isinstance(result, tuple) else result
        if group is not None and self.failed_items > self.failed_before_success:
            # The line after which `make status` stops quoting the failures above it (controller/status.py
            # _PROGRESS): inference back after a restart, a transient error in the user's code.
            log.info("collect_trajectories returned a group again after %d failed item(s)",
                     self.failed_items - self.failed_before_success)
            self.failed_before_success = self.failed_items
        if served is not None:
            tag_policy_step(group, served)
        if group is None:
            self.none_groups += 1
            if self.none_groups in (1, 10, 100) or self.none_groups % 500 == 0:
                log.info("the environment returned no group for an item (None; upstream files do so when every "
                         "score is equal): %d so far, nothing sent for them", self.none_groups)
        return result


def log_traceback(exc: BaseException) -> None:
    """The traceback at INFO, before the one ERROR line that names the cause: a log's last error line is what
    `make status` and `make up` quote (controller/status.py last_error), and a traceback's last line lacks the
    place in the user's file."""
    log.info("traceback of the error below:\n%s", "".join(traceback.format_exception(exc)).rstrip())


def raised_at(exc: BaseException) -> str:
    """`file:line` of the deepest frame in an environments/ file (the user's code), else of the deepest frame; the
    path from `environments/` on."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "(no traceback)"
    frame = ([f for f in frames if "/environments/" in f.filename.replace("\\", "/")] or frames)[-1]
    path = frame.filename.replace("\\", "/")
    return f"{path[path.rindex('/environments/') + 1:] if '/environments/' in path else path}:{frame.lineno}"


def tag_policy_step(groups, step: int) -> None:
    """Set generation_params' policy step on each group (a group, or a list of them) that has none; a step the
    environment set itself is kept."""
    for group in groups if isinstance(groups, list) else [groups]:
        if not isinstance(group, dict):
            continue
        params = group.get("generation_params")
        params = dict(params) if isinstance(params, dict) else {}
        if POLICY_STEP_KEY not in params:
            params[POLICY_STEP_KEY] = step
            group["generation_params"] = params


