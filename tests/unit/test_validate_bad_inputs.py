"""`hermes-stack validate` on bad inputs: configs, key file, command-line arguments.

Each case asserts the exact one-line messages, exit code 2, and that nothing was started: the compose choke point
(hermes_stack.controller.compose.Compose) was never called, and the compose-labelled container list is unchanged (that second
assertion is skipped only where no docker binary exists). More cases: test_validate_bad_inputs_more.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hermes_stack import keyfile as kf
from hermes_stack.controller.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
KEY = "sk-test-0123456789abcdef"
GOOD_KEYFILE = f"TAOTOKEN_API_KEY={KEY}\nTAOTOKEN_BASE_URL=https://taotoken.net/api\nTAOTOKEN_MODEL=m1\n"
DELETE = object()
pytestmark = pytest.mark.usefixtures("isolated_secrets")


@dataclass
class Case:
    id: str
    expected: list[str]
    algo: str | None = "grpo"
    toml: list[tuple[str, str]] = field(default_factory=list)  # (old, new) text replacements
    json: dict[str, object] = field(default_factory=dict)  # "section.field": value (DELETE removes)
    json_text: str | None = None  # replaces the whole settings file
    keyfile: str | bytes | None = None  # None: no key file (offline: no --keyfile, none in the working directory)
    # Instead of a file at the --keyfile path: "dir", "dangling" (symlink to nothing), "loop" (symlink to itself),
    # "missing" (nothing there).
    keyfile_kind: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # environment variables ({kf} is filled in)
    files: dict[str, str | bytes] = field(default_factory=dict)  # extra files under tmp_path (project root)
    toml_bom: bool = False  # the TOML file starts with a UTF-8 byte-order mark
    args: list[str] = field(default_factory=lambda: ["--device", "cpu"])
    remove: str | None = None  # a config file to delete
    line_of: str | None = None  # text whose line number fills {line}
    col_after: str | None = None  # text in that line; the column after it fills {col}


H_AGREE = "Hint: the two files must agree; change one of them"
H_QUOTES = "Hint: quotes make a string; write numbers and booleans bare"
H_LOCKED = "or pass --unlock (make up UNLOCK=1) if you mean to change it"
# A value of the right type out of its range or choices: what the setting is, and how to see what was changed.
H_SHIPPED = "; `git diff configs/` shows what changed"
H_LOG = " Hint: log_level: Atropos's log level (any case)" + H_SHIPPED
H_SERVER = " Hint: server: SGLang (GPU) or the built-in torch server" + H_SHIPPED
GPU24 = ["--device", "gpu", "--gpu-memory", "24"]
GPU200 = ["--device", "gpu", "--gpu-memory", "200"]

CASES = [
    # ---- algorithm rules
    Case("grpo-with-gae", [("{toml}: algorithm.advantage_estimator: found 'gae', expected 'group_relative' for GRPO. "
                           "Hint: GRPO has no critic, so GAE gives zero advantages and the reward curve lies flat")],
         toml=[('advantage_estimator = "group_relative"', 'advantage_estimator = "gae"')]),
    Case("grpo-group-size-1", [("{toml}: rollout.group_size: found 1, expected 2 or more for GRPO. Hint: a group of "
                               "one has no relative advantage; the seed uses 8")],
         toml=[("group_size = 8", "group_size = 1")], json={"algorithm.group_size": 1}),
    Case("grpo-value-loss", [("{toml}: algorithm.value_loss_coef: found 0.5, expected 0 for GRPO. Hint: GRPO trains "
                             "no critic; a value loss only adds noise")],
         toml=[("value_loss_coef = 0.0", "value_loss_coef = 0.5")]),
    Case("ppo-group-size-8", [("{toml}: rollout.group_size: found 8, expected 1 for PPO. Hint: PPO samples one "
                              "completion per prompt; use --algo grpo for groups")],
         algo="ppo", toml=[("group_size = 1", "group_size = 8")], json={"algorithm.group_size": 8}),
    Case("ppo-group-relative", [("{toml}: algorithm.advantage_estimator: found 'group_relative', expected 'gae' for "
                                "PPO. Hint: PPO's advantages come from the critic via GAE; group_relative needs "
                                "groups (GRPO)")],
         algo="ppo", toml=[('advantage_estimator = "gae"', 'advantage_estimator = "group_relative"')]),
    Case("ppo-no-value-loss", [("{toml}: algorithm.value_loss_coef: found 0.0, expected a value > 0 for PPO. Hint: "
                               "without a critic loss the value head never learns and GAE advantages are noise; "
                               "try 0.5")],
         algo="ppo", toml=[("value_loss_coef = 0.5", "value_loss_coef = 0.0")]),
    Case("ppo-gamma-0", [("{toml}: algorithm.gamma: found 0.0, expected a value in (0, 1]. Hint: PPO's seed uses "
                         "gamma 1.0 and lam 0.95")], algo="ppo", toml=[("gamma = 1.0", "gamma = 0.0")]),
    Case("ppo-lam-1.5", [("{toml}: algorithm.lam: found 1.5, expected a value in (0, 1]. Hint: PPO's seed uses "
                         "gamma 1.0 and lam 0.95")], algo="ppo", toml=[("lam = 0.95", "lam = 1.5")]),
    Case("grpo-flag-ppo-file", [("{toml}: algorithm.name: found 'ppo', expected 'grpo' (from --algo grpo). Hint: run "
                                "with --algo ppo, or restore name = \"grpo\"; the ppo files are "
                                "config_ppo.toml/settings_ppo.json")],
         toml=[('name = "grpo"', 'name = "ppo"')]),
    Case("ppo-flag-grpo-file", [("{toml}: algorithm.name: found 'grpo', expected 'ppo' (from --algo ppo). Hint: run "
                                "with --algo grpo, or restore name = \"ppo\"; the grpo files are "
                                "config_grpo.toml/settings_grpo.json")],
         algo="ppo", toml=[('name = "ppo"', 'name = "grpo"')]),
    Case("settings-name-ppo", [("{json}: algorithm.name: found 'ppo', expected 'grpo' (from --algo grpo). Hint: set "
                               "\"name\": \"grpo\" in {json}")], json={"algorithm.name": "ppo"}),
    # ---- TOML shape and types
    Case("toml-unknown-key", [("{toml}: rollout.group_sise: found an unknown key, expected one of batch_size, "
                              "group_size, max_token_length, temperature, top_p. Hint: did you mean "
                              "rollout.group_size?")], toml=[("group_size = 8", "group_sise = 8")]),
    Case("toml-unknown-section", [("{toml}: rollout: found no such section, expected a [rollout] section. Hint: "
                                  "restore it from the shipped file in git"),
                                  ("{toml}: rollouts: found an unknown section, expected one of algorithm, atropos, "
                                  "environment, reward, rollout. Hint: did you mean rollout?")],
         toml=[("[rollout]", "[rollouts]")]),
    Case("toml-int-as-string", ['{toml}: rollout.group_size: found "8" (a string), expected an integer. ' + H_QUOTES],
         toml=[("group_size = 8", 'group_size = "8"')]),
    Case("toml-float-as-word", ['{toml}: rollout.temperature: found "hot" (a string), expected a number. ' + H_QUOTES],
         toml=[("temperature = 0.8", 'temperature = "hot"')]),
    Case("toml-bad-log-level", [("{toml}: atropos.log_level: found \"verbose\", expected 'debug', 'info', 'warning' "
                                "or 'error'." + H_LOG)], toml=[('log_level = "info"', 'log_level = "verbose"')]),
    Case("toml-missing-equals", [("{toml}:{line}:{col}: syntax: found text where TOML expected '=' after a key in a key/value pair, "
                                 "expected valid TOML. Hint: fix that line; `git diff configs/` shows what changed")],
         toml=[("batch_size = 32", "batch_size 32")], line_of="batch_size 32", col_after="batch_size "),
    Case("toml-unterminated-string", [("{toml}:{line}:{col}: syntax: found illegal character '\\n', expected valid "
                                      "TOML. Hint: fix that line; `git diff configs/` shows what changed")],
         toml=[('api_host = "localhost"', 'api_host = "localhost')], line_of='api_host = "localhost',
         col_after='api_host = "localhost'),
    Case("toml-missing-section", [("{toml}: reward: found no such section, expected a [reward] section. Hint: restore "
                                  "it from the shipped file in git")],
         toml=[("[reward]\ncorrectness_weight = 1.0\nformat_weight = 0.1\n", "")]),
    Case("toml-missing-key", [("{toml}: algorithm.name: found nothing, expected 'ppo' or 'grpo'. Hint: add name to "
                              "the algorithm section")], toml=[('name = "grpo"\n', "")]),
    Case("toml-port-zero", ["{toml}: atropos.api_port: found 0, expected greater than or equal to 1. Hint: api_port: Atropos's API port "
                            "(settings atropos.rollout_server_url must use the same)" + H_SHIPPED],
         toml=[("api_port = 8000", "api_port = 0")]),
    Case("toml-top-p-zero", ["{toml}: rollout.top_p: found 0.0, expected greater than 0. Hint: top_p: nucleus sampling's probability "
                             "mass" + H_SHIPPED],
         toml=[("top_p = 0.95", "top_p = 0.0")]),
    Case("toml-bad-kl-penalty", ["{toml}: algorithm.kl_penalty: found \"k2\", expected 'k3_loss' or 'k1_reward'. Hint: "
                                 "kl_penalty: the KL regulariser, the same in both engines (trainer/algorithms.py)"
                                 + H_SHIPPED],
         toml=[('kl_penalty = "k3_loss"', 'kl_penalty = "k2"')]),
    Case("json-micro-batch-zero", ["{json}: trainer.micro_batch_size: found 0, expected greater than or equal to 1. Hint: "
                                   "micro_batch_size: sequences per forward/backward pass (torch engine)" + H_SHIPPED],
         json={"trainer.micro_batch_size": 0}),
    Case("toml-bad-split", ["{toml}: environment.split: found \"validation\", expected 'train' or 'test'. Hint: split: which "
                            "split the environment serves" + H_SHIPPED],
         toml=[('split = "train"', 'split = "validation"')]),
    Case("toml-tiny-max-tokens", ["{toml}: rollout.max_token_length: found 8, expected greater than or equal to 16. Hint: "
                                  "max_token_length: per-sequence limit for rollouts (prompt + completion)" + H_SHIPPED],
         toml=[("max_token_length = 2048", "max_token_length = 8")]),
    Case("toml-missing-file", [("{toml}: (file): found no such file, expected the file config_grpo.toml. Hint: pass "
                               "--config-dir pointing at the configs/ folder, or restore it from git")],
         remove="config_grpo.toml"),
    # ---- settings JSON
    Case("json-double-comma", [("{json}:{line}:{col}: syntax: found expecting property name enclosed in double "
                               "quotes, expected valid JSON. Hint: JSON has no comments and no trailing commas; "
                               "strings take double quotes")],
         json_text="DOUBLE_COMMA", line_of='"port": 8001,,', col_after='"port": 8001,'),
    Case("json-top-level-array", [("{json}: (top level): found a JSON list, expected a JSON object. Hint: the file "
                                  "holds one object with sections tinker, inference, algorithm, …")], json_text="[]"),
    Case("json-unknown-key", [("{json}: tinker.lora_rnak: found an unknown key, expected one of checkpoint_dir, "
                              "learning_rate, lora_rank, max_token_trainer_length, save_checkpoint_interval. Hint: "
                              "did you mean tinker.lora_rank?")],
         json={"tinker.lora_rank": DELETE, "tinker.lora_rnak": 32}),
    Case("json-int-as-string", ['{json}: tinker.lora_rank: found "32" (a string), expected an integer. ' + H_QUOTES],
         json={"tinker.lora_rank": "32"}),
    Case("json-bad-server", ["{json}: inference.server: found \"vllm\", expected 'sglang' or 'builtin'." + H_SERVER],
         json={"inference.server": "vllm"}),
    Case("locked-lora-rank", ["{json}: tinker.lora_rank: found 16, expected 32 (locked). Hint: restore 32, " + H_LOCKED],
         json={"tinker.lora_rank": 16}),
    Case("locked-learning-rate", ["{json}: tinker.learning_rate: found 0.0001, expected 4e-05 (locked). Hint: restore "
                                  "4e-05, " + H_LOCKED], json={"tinker.learning_rate": 1e-4}),
    Case("locked-trainer-length", ["{json}: tinker.max_token_trainer_length: found 4096, expected 9000 (locked). "
                                   "Hint: restore 9000, " + H_LOCKED], json={"tinker.max_token_trainer_length": 4096}),
    Case("settings-group-size", ["{json}: algorithm.group_size: found 4, expected 8 ([rollout] group_size in {toml}). "
                                 + H_AGREE], json={"algorithm.group_size": 4}),
    Case("settings-kl-coef", ["{json}: algorithm.kl_coef: found 0.2, expected 0.1 ([algorithm] kl_coef in {toml}). "
                              + H_AGREE], json={"algorithm.kl_coef": 0.2}),
    Case("atropos-port", [("{json}: atropos.rollout_server_url: found port 8080 (http://localhost:8080), expected port "
                          "8000 ([atropos] api_port in {toml}). Hint: the services would wait for an Atropos that is "
                          "not there; change one of the two")],
         json={"atropos.rollout_server_url": "http://localhost:8080"}),
    Case("atropos-url-no-scheme", [("{json}: atropos.rollout_server_url: found 'localhost:8000', expected an http URL "
                                   "like 'http://localhost:8000'. Hint: the environment and the trainer reach Atropos "
                                   "here")], json={"atropos.rollout_server_url": "localhost:8000"}),
    Case("inference-port", [("{json}: inference.base_url: found port 8002 (http://localhost:8002/v1), expected port "
                            "8001 (inference.port). Hint: the environment would call a port nobody serves")],
         json={"inference.base_url": "http://localhost:8002/v1"}),
    Case("inference-no-v1", [("{json}: inference.base_url: found 'http://localhost:8001', expected a URL ending in "
                             "exactly one /v1. Hint: use 'http://localhost:8001/v1'; a doubled or missing /v1 answers "
                             "404")], json={"inference.base_url": "http://localhost:8001"}),
    Case("inference-double-v1", [("{json}: inference.base_url: found 'http://localhost:8001/v1/v1', expected a URL "
                                 "ending in exactly one /v1. Hint: use 'http://localhost:8001/v1'; a doubled or "
                                 "missing /v1 answers 404")], json={"inference.base_url": "http://localhost:8001/v1/v1"}),
    Case("memory-budget-24gib", [("{json}: inference.model_path: found 'Qwen/Qwen3-8B', expected a model and batch "
                                 "that fit the GPU next to SGLang. Hint: the model twice (SGLang's copy 15.3 GiB, the "
                                 "trainer's with its LoRA state 19.6 GiB) plus 6 GiB reserve needs ~40.8 GiB; this GPU "
                                 "has 24 GiB: use a smaller model, a bigger GPU, or the Tinker engine")], args=GPU24),
    Case("memory-micro-batch-44gib", [("{toml}: rollout.max_token_length: found 2048, expected a model and batch that "
                                      "fit the GPU next to SGLang. Hint: micro_batch_size 1 x 2048 tokens needs ~3.8 "
                                      "GiB of activations and one group's KV cache (group_size 8 x 2048 tokens) ~2.2 "
                                      "GiB, next to 40.8 GiB of weights, LoRA state and reserve; this GPU has 44 GiB; "
                                      "lower max_token_length or group_size, or use a bigger GPU")],
         args=["--device", "gpu", "--gpu-memory", "44"]),
    # ---- key file
    Case("tinker-engine-gateway-key", [("{kf}: TINKER_API_KEY: found sk-…cdef (defaulted from TAOTOKEN_API_KEY), "
                                       "expected a Tinker key starting with tml- (or a JWT starting with eyJ). Hint: "
                                       "Tinker refuses other keys; add a line TINKER_API_KEY=tml-… to {kf}")],
         json={"trainer.engine": "tinker"}, keyfile=GOOD_KEYFILE, args=GPU200,
         toml=[("temperature = 0.8", "temperature = 1.0")]),
    # ---- the tinker engine at T != 1 (issue 24, finding 5): refused, named, whether chosen or picked by "auto"
    Case("tinker-engine-temperature", [("{toml}: rollout.temperature: found 0.8 with the tinker engine (settings "
                                       "trainer.engine is \"tinker\"), expected 1.0 for the tinker engine. Hint: "
                                       "Tinker's losses take log-probs at temperature 1, so the importance ratio "
                                       "against rollouts sampled at another temperature is wrong; set temperature = "
                                       "1.0, or \"trainer\": {{\"engine\": \"torch\"}} in {json}")],
         json={"trainer.engine": "tinker"}, keyfile=GOOD_KEYFILE + "TINKER_API_KEY=tml-" + "t" * 24 + "\n",
         args=GPU200),
    Case("auto-engine-picks-tinker-temperature", [("{toml}: rollout.temperature: found 0.8 with the tinker engine "
                                                  "(engine \"auto\" picks Tinker with the TINKER_API_KEY in {kf}), "
                                                  "expected 1.0 for the tinker engine. Hint: Tinker's losses take "
                                                  "log-probs at temperature 1, so the importance ratio against "
                                                  "rollouts sampled at another temperature is wrong; set temperature "
                                                  "= 1.0, or \"trainer\": {{\"engine\": \"torch\"}} in {json}")],
         keyfile=GOOD_KEYFILE + "TINKER_API_KEY=tml-" + "t" * 24 + "\n", args=GPU200),
    Case("api-key-env-missing", [("{json}: inference.api_key_env: found 'MY_KEY', expected a variable set in {kf} "
                                 "(TAOTOKEN_API_KEY, TAOTOKEN_BASE_URL, TAOTOKEN_MODEL, TINKER_API_KEY). Hint: add "
                                 "MY_KEY=… to {kf} or name one of its variables")],
         json={"inference.api_key_env": "MY_KEY"}, keyfile=GOOD_KEYFILE),
    Case("keyfile-base-url-v1", [("{kf}:2: TAOTOKEN_BASE_URL: found https://taotoken.net/api/v1, expected the gateway "
                                 "root without /v1. Hint: set TAOTOKEN_BASE_URL=https://taotoken.net/api; hermes-stack "
                                 "adds /v1 for OpenAI-style clients")],
         keyfile=GOOD_KEYFILE.replace("/api\n", "/api/v1\n")),
    Case("keyfile-base-url-empty", [("{kf}: TAOTOKEN_BASE_URL: found an empty value, expected the gateway root, e.g. "
                                    "https://taotoken.net/api. Hint: set TAOTOKEN_BASE_URL=… in {kf}")],
         keyfile=GOOD_KEYFILE.replace("https://taotoken.net/api", "")),
    Case("keyfile-base-url-no-scheme", [("{kf}:2: TAOTOKEN_BASE_URL: found taotoken.net/api, expected an http(s) URL of "
                                        "the gateway root, e.g. https://taotoken.net/api. Hint: set "
                                        "TAOTOKEN_BASE_URL=https://taotoken.net/api")],
         keyfile=GOOD_KEYFILE.replace("https://taotoken.net/api", "taotoken.net/api")),
    Case("keyfile-empty-key", [("{kf}: TAOTOKEN_API_KEY: found an empty value, expected your gateway key. Hint: set "
                               "TAOTOKEN_API_KEY=… in {kf}")], keyfile=GOOD_KEYFILE.replace(KEY, "")),
    Case("keyfile-no-key-line", [("{kf}: TAOTOKEN_API_KEY: found no such line, expected your gateway key. Hint: add "
                                 "TAOTOKEN_API_KEY=… to {kf}")], keyfile=GOOD_KEYFILE.split("\n", 1)[1]),
    Case("keyfile-spaces-in-quotes", [("{kf}: TAOTOKEN_API_KEY: found a value with surrounding whitespace or quotes, "
                                      "expected the bare value. Hint: write TAOTOKEN_API_KEY=sk-…cdef with nothing "
                                      "around it")], keyfile=GOOD_KEYFILE.replace(KEY, f'" {KEY} "')),
    Case("keyfile-stray-quote", [("{kf}: TAOTOKEN_API_KEY: found a value with surrounding whitespace or quotes, "
                                 "expected the bare value. Hint: write TAOTOKEN_API_KEY=sk-…cdef with nothing around "
                                 "it")], keyfile=GOOD_KEYFILE.replace(KEY, f'{KEY}"')),
    Case("keyfile-unreadable-line", [("{kf}:4: syntax: found a line python-dotenv cannot read (… …), expected "
                                     "NAME=value. Hint: one NAME=value per line, no quotes; `#` starts a comment")],
         keyfile=GOOD_KEYFILE + "FOO BAR\n"),
    # One line since round 6 (it named the line's variable "syntax", then said TAOTOKEN_API_KEY had no line).
    Case("keyfile-missing-equals", [("{kf}:1: TAOTOKEN_API_KEY: found a line python-dotenv cannot read "
                                    "(TAOTOKEN_API_KEY sk-…cdef), expected NAME=value. Hint: write NAME=value: a space "
                                    "where the = should be")],
         keyfile=GOOD_KEYFILE.replace(f"TAOTOKEN_API_KEY={KEY}", f"TAOTOKEN_API_KEY {KEY}")),
    Case("toml-not-utf8", [("{toml}:1: (file): found a byte that is not UTF-8 (0xff), expected UTF-8 text. Hint: "
                           "retype that line, or save the file as UTF-8")], toml=[("# GRPO", "# GRPO \udcff")]),
    # ---- command line
    Case("algo-unknown", [("command line: --algo: found 'x', expected ppo or grpo. Hint: hermes-stack runs PPO or "
                          "GRPO; e.g. --algo grpo")], algo="x"),
    Case("algo-uppercase", [("command line: --algo: found 'GRPO', expected ppo or grpo. Hint: hermes-stack runs PPO "
                            "or GRPO; e.g. --algo grpo")], algo="GRPO"),
    Case("algo-missing", ["hermes-stack validate: Missing option '--algo'. Hint: run `hermes-stack validate --help`"],
         algo=None),
    Case("device-unknown", [("command line: --device: found 'tpu', expected auto, cpu or gpu. Hint: auto picks gpu "
                            "only when the NVIDIA container runtime is usable")], args=["--device", "tpu"]),
    Case("gpu-memory-zero", [("command line: --gpu-memory: found 0, expected GiB of one GPU, e.g. 24 or 80. Hint: the "
                             "memory budget compares against this")], args=["--gpu-memory", "0"]),
    Case("gpu-memory-word", [("hermes-stack validate: Invalid value for '--gpu-memory': Input should be a valid number, "
                             "unable to parse string as a number. Hint: run `hermes-stack validate --help`")],
         args=["--gpu-memory", "abc"]),
    Case("option-typo", [("hermes-stack validate: No such option: --algoo (Possible options: --algo). Hint: run "
                         "`hermes-stack validate --help`")], algo=None, args=["--algoo", "grpo"]),
]


def build(case: Case, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """Write the case's files under tmp_path; return argv and the placeholders of the expected lines."""
    cdir = tmp_path / "configs"
    shutil.copytree(CONFIGS, cdir)
    algo = case.algo if case.algo in ("ppo", "grpo") else "grpo"
    toml, settings = cdir / f"config_{algo}.toml", cdir / f"settings_{algo}.json"
    text = toml.read_text()
    for old, new in case.toml:
        assert old in text, f"{case.id}: {old!r} not in {toml.name}"
        text = text.replace(old, new, 1)
    data_bytes = text.encode("utf-8", "surrogateescape")  # a lone surrogate escape writes a non-UTF-8 byte
    toml.write_bytes((b"\xef\xbb\xbf" if case.toml_bom else b"") + data_bytes)
    data = json.loads(settings.read_text())
    for dotted, value in case.json.items():
        section, name = dotted.split(".")
        if value is DELETE:
            del data[section][name]
        else:
            data[section][name] = value
    out = json.dumps(data, indent=2)
    if case.json_text == "DOUBLE_COMMA":
        out = out.replace('"port": 8001,', '"port": 8001,,')
    elif callable(case.json_text):
        out = case.json_text(out)
    elif case.json_text is not None:
        out = case.json_text
    settings.write_bytes(out.encode("utf-8", "surrogateescape") if isinstance(out, str) else out)
    for rel, content in case.files.items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    if case.remove:
        (cdir / case.remove).unlink()
    kf_path = tmp_path / "keys.env"
    if case.keyfile is not None:
        kf_path.write_bytes(case.keyfile.encode("utf-8", "surrogateescape") if isinstance(case.keyfile, str)
                            else case.keyfile)
        os.chmod(kf_path, 0o600)
    elif case.keyfile_kind == "dir":
        kf_path.mkdir(exist_ok=True)  # `files` may have put a key file inside it
    elif case.keyfile_kind == "dangling":
        kf_path.symlink_to(tmp_path / "gone.env")
    elif case.keyfile_kind == "loop":
        kf_path.symlink_to(kf_path)
    fill = {"toml": str(toml), "json": str(settings), "kf": str(kf_path), "cdir": str(cdir), "root": str(tmp_path), "line": "", "col": ""}
    if case.line_of:
        target = toml if case.line_of in toml.read_text() else settings
        lines = target.read_text().splitlines()
        number = next(i for i, line in enumerate(lines, 1) if case.line_of in line)
        fill["line"] = str(number)
        fill["col"] = str(lines[number - 1].index(case.col_after) + len(case.col_after) + 1)
    argv = ["validate"] + (["--algo", case.algo] if case.algo else [])
    named = case.keyfile is not None or (case.keyfile_kind is not None and not case.env)
    argv += ["--config-dir", str(cdir)] + (["--keyfile", str(kf_path)] if named else []) + case.args
    if "--device" not in case.args:
        argv += ["--device", "cpu"]
    return argv, fill


def compose_containers() -> set[str] | None:
    """Ids of the compose-labelled containers on this daemon (None without a docker binary)."""
    if shutil.which("docker") is None:
        return None
    done = subprocess.run(["docker", "ps", "-aq", "--filter", "label=com.docker.compose.project"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def created(before: set[str] | None, after: set[str] | None) -> set[str]:
    # Only new containers count: other stacks on a shared daemon may be removed meanwhile.
    return set() if before is None or after is None else after - before


def error_lines(err: str) -> list[str]:
    return [line.removeprefix("error: ") for line in err.splitlines() if line.startswith("error: ")]


def test_there_are_enough_distinct_bad_inputs():
    assert len({c.id for c in CASES}) == len(CASES) >= 45


def run_case(case: Case, tmp_path: Path, monkeypatch, capsys, compose_calls) -> str:
    """Run `validate` for the case in tmp_path (no key file there unless the case writes one); assert the lines,
    exit 2, no compose call and no new container. Returns stderr."""
    argv, fill = build(case, tmp_path)
    monkeypatch.chdir(tmp_path)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.format(**fill))
    before = compose_containers()
    rc = main(argv)
    after = compose_containers()
    err = capsys.readouterr().err
    assert error_lines(err) == [line.format(**fill) for line in case.expected]
    assert rc == 2
    assert compose_calls == []
    assert created(before, after) == set()
    assert KEY not in err
    return err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_each_exit_2_no_container(case, tmp_path, monkeypatch, capsys, compose_calls):
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


SUBPROCESS_CASES = ["grpo-with-gae", "keyfile-base-url-v1", "algo-unknown", "option-typo"]


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_bad_input_through_python_dash_m(case_id, tmp_path):
    case = next(c for c in CASES if c.id == case_id)
    argv, fill = build(case, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != kf.PATH_ENV}
    env["PYTHONPATH"] = str(ROOT)
    before = compose_containers()
    done = subprocess.run([sys.executable, "-m", "hermes_stack", *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60, check=False)
    after = compose_containers()
    # A usage hint names the program as typed: here `<this python> -m hermes_stack` (cli.invoked_as).
    typed = f"`{os.path.abspath(sys.executable)} -m hermes_stack "
    assert error_lines(done.stderr) == [line.format(**fill).replace("`hermes-stack ", typed) for line in case.expected]
    assert "Traceback" not in done.stderr
    assert done.returncode == 2
    assert created(before, after) == set()
