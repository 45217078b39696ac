"""The controller's environment variables, checked once for `validate` and `up` alike (both go through
commands.validate.evaluate): the tuning knobs `up` hands the services (service_env.ServiceEnv, the same function and
messages `up` uses), the compose project name, the images' repository prefix and the base images' references. A bad value is exit 2 before anything starts, not a compose error
after work has begun."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from hermes_stack.controller.preflight import SGLANG_IMAGE_DEFAULT
from hermes_stack.errors import InputError, Problem

PROJECT_ENV = "HERMES_PROJECT_NAME"
IMAGE_REPO_ENV = "HERMES_IMAGE_REPO"
# Docker's reference grammar for the repository part: an optional registry host[:port], then path components of
# lower-case letters and digits joined by '.', '_', '__' or '-'. "Bad Repo" rendered `image: Bad Repo/trainer:cpu`
# and failed only at the build.
_IMAGE_REPO = re.compile(r"(?:[A-Za-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                         r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
# An image reference: the repository as above, then an optional :tag and an optional @digest (docker's grammar).
_IMAGE_REF = re.compile(_IMAGE_REPO.pattern + r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+:[0-9a-f]{32,})?")
# The image references a user may set: the build's bases (compose.base.yml's build args). "Bad Image" was written
# into the build args and failed only at the build. (name: the default, for the hint)
IMAGE_ENVS = {"HERMES_SGLANG_IMAGE": SGLANG_IMAGE_DEFAULT, "HERMES_BASE_IMAGE": "python:3.11-slim-bookworm"}
# Compose's own rule for project names (lower-case letters, digits, - and _, starting with a letter or digit).
_PROJECT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


def _suggested(project: str) -> str:
    """A project name compose takes, near `project`: full-width or compatibility letters (an input method's ｈ) as
    their plain ones first, so "ｈermes" suggests hermes, not ermes."""
    import unicodedata

    plain = unicodedata.normalize("NFKC", project).lower()
    return re.sub(r"[^a-z0-9_-]+", "-", plain).strip("-_") or "hermes"


# Where a user sets what `up` derives itself (service_env.SET_BY_UP); the shell's value would be replaced silently.
_DERIVED_FROM = {
    "unlock": "pass --unlock (make up UNLOCK=1)",
    "model": "pass --model (make up MODEL=…)",
    "served_model_name": "it is the settings file's inference.model_path",
    "inference_port": "set inference.port in the settings file",
    "inference_replica_urls": "set inference.replicas in the settings file (or make up REPLICAS=N)",
    "sglang_mem_fraction": "it follows the GPU memory split validate prints",
    "micro_batch_size": "set trainer.micro_batch_size in the settings file",
    "inference_key": "put HERMES_INFERENCE_KEY in the key file",
}


def environment_warnings(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per variable of the shell that `up` sets itself from the configuration: the value is not used."""
    from hermes_stack.service_env import set_by_up_aliases

    environ = os.environ if environ is None else environ
    return [Problem("(environment)", alias, "a value in this shell (not used)",
                    "unset: `up` sets it from the configuration", _DERIVED_FROM[name]).line()
            for name, alias in set_by_up_aliases().items() if environ.get(alias, "").strip()]


def environment_problems(environ: Mapping[str, str] | None = None) -> list[Problem]:
    from hermes_stack.service_env import ServiceEnv, knob_aliases

    environ = os.environ if environ is None else environ
    problems: list[Problem] = []
    try:
        ServiceEnv.from_environ({alias: environ[alias] for alias in knob_aliases() if alias in environ})
    except InputError as exc:
        problems += exc.problems
    project = environ.get(PROJECT_ENV, "")
    if project and not _PROJECT_NAME.fullmatch(project):
        problems.append(Problem("(environment)", PROJECT_ENV, repr(project),
                                "a compose project name: lower-case letters, digits, - and _",
                                f"e.g. {PROJECT_ENV}={_suggested(project)}"
                                f"; or unset it for the default"))
    repo = environ.get(IMAGE_REPO_ENV, "")
    if repo and not _IMAGE_REPO.fullmatch(repo):
        problems.append(Problem("(environment)", IMAGE_REPO_ENV, repr(repo),
                                "an image repository prefix: lower-case letters, digits, '.', '_', '-' and '/' "
                                "(with a registry host:port first if any)",
                                "the images are named <it>/trainer, <it>/atropos, …; e.g. hermes-stack (the default: "
                                "unset it)"))
    for name, default in IMAGE_ENVS.items():
        image = environ.get(name, "")
        if image and not _IMAGE_REF.fullmatch(image):
            problems.append(Problem("(environment)", name, repr(image),
                                    "an image reference: repository[:tag][@digest], the repository of lower-case "
                                    "letters, digits, '.', '_', '-' and '/'",
                                    f"e.g. {name}={default} (the default: unset it)"))
    return problems
