"""Shared pieces of the trainer tests: a real run-api process, a fake inference service, a tiny real engine.

The engine here is a genuine Engine implementation (a bag-of-tokens softmax policy trained by group-relative
REINFORCE with torch), small enough that a step takes milliseconds; it lets the loop, checkpoints and kill/resume
be tested without the transformers model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import torch

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
from fakes.loopback import JsonHandler, LoopbackServer, free_port


class AtroposProcess:
    """atroposlib's real `run-api` on a loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._start()

    def _start(self) -> None:
        run_api = VENV_BIN / "run-api"
        cmd = [str(run_api)] if run_api.exists() else [sys.executable, "-m", "atroposlib.cli.run_api"]
        self.proc = subprocess.Popen([*cmd, "--host", "127.0.0.1", "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("run-api did not start within 30 s")

    def restart(self) -> None:
        """A real restart on the same port: every registration and queued group is gone."""
        self.stop()
        self._start()

    def reset(self) -> None:
        httpx.get(self.url + "/reset_data", timeout=5)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Feeder:
    """Plays the environment's part: /register-env, then /scored_data groups."""

    def __init__(self, url: str, group_size: int):
        self.http = httpx.Client(base_url=url, timeout=5)
        self.group_size = group_size
        self.env_id: int | None = None

    def register(self, timeout_s: float = 20.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            answer = self.http.post("/register-env", json={"max_token_length": 64, "desired_name": "feeder",
                                                           "weight": 1.0, "group_size": self.group_size}).json()
            if answer.get("status") == "success":
                self.env_id = answer["env_id"]
                return self.env_id
            time.sleep(0.05)  # "wait for trainer to start": the trainer has not polled /batch yet
        raise RuntimeError("atropos never accepted /register-env")

    def group(self, prompt: list[int], completions: list[list[int]], scores: list[float],
              logprobs: bool = True) -> dict[str, Any]:
        tokens = [prompt + c for c in completions]
        masks = [[-100] * len(prompt) + c for c in completions]
        body: dict[str, Any] = {"tokens": tokens, "masks": masks, "scores": scores, "env_id": self.env_id}
        if logprobs:
            # ManagedServer's layout: 1.0 on prompt positions, the sampled token's logprob after.
            body["inference_logprobs"] = [[1.0] * len(prompt) + [-0.5 - 0.1 * i for i in range(len(c))]
                                          for c in completions]
        return body

    def send(self, group: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post("/scored_data", json=group)
        response.raise_for_status()
        return response.json()

    def send_random(self, n_groups: int, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        for _ in range(n_groups):
            prompt = torch.randint(3, 16, (3,), generator=gen).tolist()
            completions = [torch.randint(3, 16, (2,), generator=gen).tolist() for _ in range(self.group_size)]
            scores = [float(c[0] % 2) for c in completions]
            if len(set(scores)) == 1 and self.group_size > 1:
                scores[0] = 1.0 - scores[0]
            group = self.group(prompt, completions, scores)
            # The built-in environment's verdicts ride in atroposlib's per-sequence overrides (right = score 1 here).
            from hermes_stack.tasks.reward import CORRECT_OVERRIDE

            group["overrides"] = [{CORRECT_OVERRIDE: s == 1.0} for s in scores]
            self.send(group)


class TinyEngine:
    """A real (tiny) Engine: unigram softmax policy over a 16-token vocabulary, group-relative REINFORCE."""

    VOCAB = 16

    def __init__(self, lr: float = 0.5, seed: int = 0):
        torch.manual_seed(seed)
        self.logits = torch.nn.Parameter(torch.zeros(self.VOCAB))
        self.optimizer = torch.optim.Adam([self.logits], lr=lr)
        self.steps = 0

    def train_step(self, groups: list[list[Any]]) -> dict[str, float]:
        logp = torch.log_softmax(self.logits, dim=0)
        terms, advs = [], []
        for group in groups:
            scores = torch.tensor([s.score for s in group])
            adv = scores - scores.mean()
            for seq, a in zip(group, adv):
                trained = [t for t, m in zip(seq.tokens, seq.mask) if m != -100]
                terms.append(-a * logp[trained].sum())
                advs.append(float(a))
        loss = torch.stack(terms).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        adv_t = torch.tensor(advs)
        loss = loss.detach()
        return {"loss": float(loss), "policy_loss": float(loss), "kl": 0.0, "advantage_mean": float(adv_t.mean()),
                "advantage_std": float(adv_t.std(unbiased=False))}

    def export_weights(self, directory: Path) -> Path:
        torch.save({"logits": self.logits.detach().clone()}, directory / "policy.pt")
        (directory / "config.json").write_text(json.dumps({"model_type": "tiny-unigram", "vocab": self.VOCAB}))
        return directory

    def state_dict(self) -> dict[str, Any]:
        return {"policy": {"logits": self.logits.detach().clone()}, "optimizer": self.optimizer.state_dict(),
                "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.logits.copy_(state["policy"]["logits"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])


class FakeInferenceForTrainer(LoopbackServer):  # the trainer-facing routes; fakes.fake_inference: /generate
    """The inference service's HTTP surface the trainer uses, recording calls and checking the Bearer key."""

    def __init__(self, key: str = "internal-key", model: str = "embedded"):
        self.key, self.model = key, model
        self.calls: list[tuple[str, str, Any]] = []
        self.start()
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def handler(self) -> type[JsonHandler]:
        outer = self

        class Handler(JsonHandler):
            def _authorised(self) -> bool:
                if self.path == "/health":
                    return True
                if self.headers.get("Authorization") != f"Bearer {outer.key}":
                    self.send_json(401, {"error": "bad key"})
                    return False
                return True

            def do_GET(self) -> None:
                outer.calls.append(("GET", self.path, None))
                if not self._authorised():
                    return
                if self.path == "/health":
                    self.send_json(200, {"status": "ok"})
                elif self.path == "/v1/models":
                    self.send_json(200, {"object": "list", "data": [{"id": outer.model, "object": "model"}]})
                else:
                    self.send_json(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = self.read_json()
                outer.calls.append(("POST", self.path, body))
                if not self._authorised():
                    return
                if self.path == "/update_weights_from_disk":
                    ok = Path(body["model_path"]).is_dir()
                    self.send_json(200 if ok else 400, {"success": ok, "message": "loaded" if ok else "no such dir"})
                elif self.path == "/generate":
                    self.send_json(200, {"text": "2", "meta_info": {"finish_reason": {"type": "length"}}})
                else:
                    self.send_json(404, {"error": "not found"})

        return Handler

    def weight_updates(self) -> list[str]:
        return [body["model_path"] for method, path, body in self.calls if path == "/update_weights_from_disk"]


class BuiltinInference:
    """The real built-in inference service (BuiltinBackend behind create_app, hermes_stack.inference) in this process,
    served by uvicorn on a loopback port: what the dry-run's checks talk to in the CPU stack. Weights and adapters
    load from `data_dir` only, as in the stack."""

    def __init__(self, model_dir: Path, data_dir: Path, key: str = "internal-key", seed: int = 0):
        import threading

        import uvicorn

        from hermes_stack.inference.builtin import BuiltinBackend
        from hermes_stack.inference.server import create_app

        data_dir.mkdir(parents=True, exist_ok=True)
        self.key = key
        self.backend = BuiltinBackend(str(model_dir), seed=seed)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        config = uvicorn.Config(create_app(self.backend, key, data_dir=data_dir), host="127.0.0.1", port=self.port,
                                log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the built-in inference service did not start within 30 s")
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def trainer_env(data_dir: Path, atropos_url: str, inference: FakeInferenceForTrainer | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "WANDB_"))}
    env.update({"HERMES_DATA_DIR": str(data_dir), "HERMES_ATROPOS_URL": atropos_url,
                "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"})
    if inference is not None:
        env.update({"HERMES_INFERENCE_URL": inference.url, "HERMES_INFERENCE_KEY": inference.key})
    env.update(extra)
    return env


_EMBEDDED: dict[str, Path] = {}


def embedded_model_dir() -> Path:
    """The real embedded tiny model, built once per test process without the warm start (format does not matter
    for protocol tests; the tokens fed are in its vocabulary)."""
    if "dir" not in _EMBEDDED:
        import tempfile

        from hermes_stack.modelcore.embedded import build

        directory = Path(tempfile.mkdtemp(prefix="hermes-embedded-")) / "model"
        build(directory, seed=0, steps=0)
        _EMBEDDED["dir"] = directory
    return _EMBEDDED["dir"]


def write_configs(directory: Path, *, algo: str = "grpo", group_size: int = 4, batch_size: int = 2,
                  num_steps: int = 8, interval: int = 2, checkpoint_dir: str = "./ck") -> Path:
    """The trainer tests' values for the one config writer (fakes.stack_files.write_stack): a tiny batch, step count
    and save interval; the repository's dataset, model and judge lines untouched."""
    from fakes.stack_files import write_stack

    return write_stack(directory, algo, group_size=group_size, batch_size=batch_size, max_token_length=64,
                       num_steps=num_steps, judge=None, judge_style=None, checkpoint_interval=interval,
                       checkpoint_dir=checkpoint_dir)


def grpo_params(**changes):
    """AlgorithmSection of the shipped GRPO shape with no regularisers, for engine tests; `changes` override."""
    from hermes_stack.config.models import AlgorithmSection

    base = {"name": "grpo", "advantage_estimator": "group_relative", "gamma": 1.0, "lam": 1.0, "clip_epsilon": 0.2,
            "entropy_coef": 0.0, "value_loss_coef": 0.0, "kl_coef": 0.0}
    return AlgorithmSection(**{**base, **changes})


def ppo_params(**changes):
    """AlgorithmSection of the shipped PPO shape (a critic, GAE) with no regularisers, for engine tests."""
    from hermes_stack.config.models import AlgorithmSection

    base = {"name": "ppo", "advantage_estimator": "gae", "gamma": 1.0, "lam": 0.95, "clip_epsilon": 0.2,
            "entropy_coef": 0.0, "value_loss_coef": 0.5, "kl_coef": 0.0}
    return AlgorithmSection(**{**base, **changes})


def read_metrics(path: Path) -> list[dict]:
    """A metrics.jsonl's step records, read as `status` reads them (controller/status.parse_metrics)."""
    from hermes_stack.controller.status import parse_metrics

    return parse_metrics(path.read_text()) if path.exists() else []


def read_events(path: Path) -> list[dict]:
    """A metrics.jsonl's event records, read as `status` reads them (controller/status.parse_events)."""
    from hermes_stack.controller.status import parse_events

    return parse_events(path.read_text()) if path.exists() else []
