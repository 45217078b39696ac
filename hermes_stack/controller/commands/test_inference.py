"""`hermes-stack test-inference --algo grpo [--steps N] [--group-size N] [--out FILE] [--local URL]`: a few scored groups before
paying for training.

Runs the environment's own `process` command (atroposlib's process mode: no Atropos, no trainer) in a child process: with a key file, completions come from
the gateway model (TAOTOKEN_MODEL, through hermes_stack.gateway); offline, or with --local URL, from the local
inference service (the stack's, OpenAI-style URL ending in /v1, `/generate` at its root). Writes the scored groups to
JSONL (plus atroposlib's HTML view next to it) and prints accuracy, format rate and mean reward.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from hermes_stack.controller.commands.app import app
from hermes_stack.errors import InputError, Problem, StackError


def _inference_key(stack, keyfile_path: Path | None) -> str:
    """HERMES_INFERENCE_KEY, else the key file's inference.api_key_env value, else (offline) the key `up`
    generated and keeps in .hermes/inference.key: the same order `up` gives the service its key."""
    if os.environ.get("HERMES_INFERENCE_KEY"):
        return os.environ["HERMES_INFERENCE_KEY"]
    from hermes_stack.controller.stack_state import STATE_DIR, project_root, stored_inference_key
    from hermes_stack.keyfile import load_keyfile

    keyfile = load_keyfile(keyfile_path)
    from_file = (keyfile.get(stack.settings.inference.api_key_env) or "") if not keyfile.offline else ""
    return from_file or stored_inference_key(project_root() / STATE_DIR) or ""


def probe_inference(base_url: str, key: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds, naming the URL, instead of after atroposlib's retries."""
    import httpx

    from hermes_stack.health import server_root

    root = server_root(base_url)
    try:
        response = httpx.get(f"{root}/health", timeout=timeout_s,
                             headers={"authorization": f"Bearer {key}"} if key else {})
    except httpx.HTTPError as exc:
        raise StackError(
            f"the local inference service at {base_url} is not reachable ({type(exc).__name__}); start the stack "
            "(`make up`) or pass --local <URL ending in /v1>"
        ) from None
    if response.status_code in (401, 403):
        raise StackError(f"the inference service at {base_url} refused the key ({response.status_code}): set "
                         "HERMES_INFERENCE_KEY or the key file's inference.api_key_env variable")


def run_environment_process(argv: list[str], environ: dict[str, str]) -> dict:
    """The environment's own command (`python -m hermes_stack.environment process ...`) in a child process: the host
    runs the service's entry point, never imports it. Its log lines are shown as they come; its error lines become
    this command's error (same exit code); its totals come back through --summary."""
    import json
    import subprocess
    import sys
    import tempfile

    from hermes_stack.controller import console

    with tempfile.TemporaryDirectory(prefix="hermes-test-inference-") as tmp:
        summary = Path(tmp) / "totals.json"
        child = subprocess.Popen([sys.executable, "-m", "hermes_stack.environment", "process", *argv,
                                  "--summary", str(summary)], env=environ, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        errors = []
        for line in child.stdout:  # the environment's log format: "<date> <time> <LEVEL> <logger>: <message>"
            fields = line.rstrip("\n").split(" ", 4)
            if len(fields) == 5 and fields[2] == "ERROR":
                errors.append(fields[4])
            elif line.strip():
                console.info(line.rstrip("\n"))
        code = child.wait()
        if code != 0:
            raise EnvironmentProcessFailed(errors or [f"the environment's process command exited {code}"], code)
        return json.loads(summary.read_text())


class EnvironmentProcessFailed(StackError):
    def __init__(self, lines: list[str], exit_code: int):
        super().__init__("; ".join(lines))
        self._lines, self.exit_code = lines, exit_code

    def lines(self) -> list[str]:
        return self._lines


def _check_local_and_tokenizer(local: str | None, tokenizer: str | None) -> None:
    """Before the child process starts: a --local that is no http(s) URL ending in /v1 (httpx would say
    UnsupportedProtocol, or raise on a bad port), a --tokenizer path that is not a folder (transformers would print
    ~90 lines about a repo id)."""
    from urllib.parse import urlsplit

    if local is not None:
        try:
            parts = urlsplit(local)
            port = parts.port  # raises for a port that is no number or out of range
        except ValueError as exc:
            parts, port = None, str(exc)
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
                or not parts.path.rstrip("/").endswith("/v1") or isinstance(port, str):
            raise InputError(Problem("command line", "--local", repr(local), "an http(s) URL ending in /v1",
                                     "e.g. --local http://localhost:8001/v1 (the stack's inference service)"))
    # Only what is written as a path (/…, ./…, ~…): a bare name such as gpt2 or org/name may be a hub id.
    if tokenizer is not None and tokenizer.startswith(("/", ".", "~")) and not Path(tokenizer).expanduser().is_dir():
        found = "a file, not a folder" if Path(tokenizer).expanduser().exists() else "no such folder"
        raise InputError(Problem("command line", "--tokenizer", f"{tokenizer!r} ({found})",
                                 "a local tokenizer folder (tokenizer.json, tokenizer_config.json) or a hub id",
                                 "leave it out to use the inference model's tokenizer"))


@app.command("test-inference")
def test_inference(
    algo: Annotated[str, typer.Option("--algo", help="ppo or grpo: which configs to use")],
    steps: Annotated[int, typer.Option("--steps", min=1, help="Groups (prompts) to generate and score.")] = 4,
    group_size: Annotated[int | None, typer.Option(
        "--group-size", min=1, max=1024, help="Completions per prompt (default: the config's rollout.group_size).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="JSONL file for the scored groups (default: .hermes/test-inference-<algo>.jsonl).")] = None,
    local: Annotated[str | None, typer.Option(
        "--local", help="Use this local inference service (URL ending in /v1) instead of the gateway.")] = None,
    config_dir: Annotated[Path, typer.Option("--config-dir", help="Folder holding the config files.")] = Path(
        "configs"),
    keyfile: Annotated[Path | None, typer.Option(
        "--keyfile", help="Key file (default: $HERMES_KEYFILE or .env.taotoken).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu (embedded profile) or gpu.")] = "auto",
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", help="Local tokenizer directory (default: from the inference model).")] = None,
) -> None:
    """Generate and score a few groups with the gateway model (or the local inference service offline)."""
    from hermes_stack.controller import console
    from hermes_stack.controller.commands.validate import validated_stack
    from hermes_stack.controller.stack_state import STATE_DIR, project_root
    from hermes_stack.gateway import settings_from

    _check_local_and_tokenizer(local, tokenizer)
    stack = validated_stack(algo, config_dir, keyfile, device=device, in_containers=False)  # runs on the host
    from hermes_stack.environments_catalog import users_environment

    if (own := users_environment(project_root(), stack.config.environment.name)) is not None:
        # The probe scores with the built-in environment's prompts and rule reward; it said nothing, and a user
        # took its figures for their own file's.
        console.notice(f"[environment] name is {own.name} ({own.file}), your own environment: test-inference probes "
                       "the model with the built-in environment's prompts and reward, not your file's; `make "
                       f"dry-run ALGO={algo}` imports your file and runs its config_init() and setup()")
    gateway = None if local else settings_from(keyfile_path=keyfile, timeout_s=60.0)
    # Default: the controller's own state folder (git-ignored), not a data/ folder in the user's checkout
    out = out or project_root() / STATE_DIR / f"test-inference-{algo}.jsonl"
    size = group_size or stack.config.rollout.group_size
    argv = ["--groups", str(steps), "--group-size", str(size), "--out", str(out),
            *(["--tokenizer", tokenizer] if tokenizer else [])]
    # The child loads the same configs the way a service does (ServiceEnv): the same files, profile and model.
    environ = dict(os.environ) | {"HERMES_ALGO": algo, "HERMES_CONFIG_DIR": str(config_dir),
                                  "HERMES_PROFILE": stack.profile, "HERMES_MODEL": stack.model or "",
                                  "HERMES_UNLOCK": "0", **({"HERMES_KEYFILE": str(keyfile)} if keyfile else {})}
    if gateway is not None:
        if not gateway.model:
            raise InputError(Problem(str(keyfile or ".env.taotoken"), "TAOTOKEN_MODEL", "no value",
                                     "the gateway model to test", "add TAOTOKEN_MODEL=<model> to the key file, or "
                                     "pass --local <URL> to use the local inference service"))
        console.info(f"test-inference: {steps} groups of {size} from the gateway model "
                     f"{gateway.model} at {gateway.root}")
        argv += ["--gateway", "--offline", "no"]
    else:
        inference_url = local or stack.settings.inference.base_url
        key = _inference_key(stack, keyfile)
        reason = "--local" if local else "offline mode (no key file)"
        console.info(f"test-inference: {reason}: {steps} groups of {size} from the "
                     f"local inference service at {inference_url}")
        probe_inference(inference_url, key)
        environ["HERMES_INFERENCE_KEY"] = key
        argv += ["--inference-url", inference_url, "--offline", "no" if local else "yes"]
    t = run_environment_process(argv, environ)
    console.info(f"wrote {t['path']}: {t['groups']} groups, {t['sequences']} completions")
    console.info(f"accuracy {t['accuracy']:.3f}  format rate {t['format_rate']:.3f}  mean reward {t['mean_reward']:.3f}")
