"""`hermes-stack validate` on bad inputs, round 2 (issue 13) and the blog's mistakes (issue 15).

Same contract as test_validate_bad_inputs.py, whose machinery this reuses: the exact one-line messages, exit 2, no
call to the compose choke point, no new container, the key never printed.
"""

from __future__ import annotations

import json

import pytest
from test_validate_bad_inputs import CASES as ROUND_1
from test_validate_bad_inputs import DELETE, GOOD_KEYFILE, GPU200, H_LOG, H_SHIPPED, KEY, Case, run_case

pytestmark = pytest.mark.usefixtures("isolated_secrets")

H_KEYFILE = "Hint: point --keyfile or $HERMES_KEYFILE at your key file (cp .env.taotoken.example {kf} makes one)"
H_KEYPASTE = "Hint: paste the key from your account page over the whole value of TAOTOKEN_API_KEY"
H_NAME = "expected a name hermes-stack reads. Hint: did you mean {near}? Names are upper-case ASCII"
H_MODEL = "Hint: the model folder's config.json comes with the weights; copy it again"
H_ROW = 'Hint: each line is one object like {{"question": "…", "answer": "… #### 42"}}'
H_CKPT = ("expected a folder inside the data volume (a relative path without .., or one under /data). Hint: relative "
          "paths land in <data>/checkpoints/; the seed uses ./temp/")
FINITE = "expected a finite number"
GOOD_MODEL = {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
              "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936}
UNLOCK = ["--device", "cpu", "--unlock"]


def model(**changes) -> str:
    return json.dumps({k: v for k, v in {**GOOD_MODEL, **changes}.items() if v is not DELETE})


def url_case(id: str, url: str, found: str, expected: str, hint: str) -> Case:
    return Case(id, [f"{{kf}}:2: TAOTOKEN_BASE_URL: found {found}, expected {expected}. Hint: {hint}"],
                keyfile=GOOD_KEYFILE.replace("https://taotoken.net/api", url))


def shipped_hint(key: str, what: str | None) -> str:
    """A range or choice error's hint: `what` is the setting's account (its description's first clause). None: the
    expected text carries its own hint (a rule's message)."""
    return f". Hint: {key.rsplit('.', 1)[1]}: {what}{H_SHIPPED}" if what else ""


def toml_number(id: str, old: str, new: str, key: str, found: str, expected: str, what: str | None = None,
                **kw) -> Case:
    return Case(id, [f"{{toml}}: {key}: found {found}, {expected}{shipped_hint(key, what)}"], toml=[(old, new)], **kw)


def json_number(id: str, dotted: str, value: object, found: str, expected: str, what: str | None = None,
                **kw) -> Case:
    return Case(id, [f"{{json}}: {dotted}: found {found}, {expected}{shipped_hint(dotted, what)}"],
                json={dotted: value}, **kw)


TEMPERATURE = "sampling temperature (OpenAI-style servers cap it at 2)"
JUDGE_TIMEOUT = "seconds one judge call may take"
LEARNING_RATE = "the policy's learning rate (locked)"
H_KEYDIR = ("Hint: name a file, not a folder: cp .env.taotoken.example {kf}/.env.taotoken makes one; then --keyfile "
            "{kf}/.env.taotoken")


CASES = [
    # ---- key-file path: only the absence of the default file is offline mode
    Case("keyfile-is-a-directory", ["{kf}: (file): found a directory, expected a key file of NAME=value lines. "
                                    + H_KEYDIR], keyfile_kind="dir"),
    # `cp .env.taotoken.example <folder>` would make <folder>/.env.taotoken.example, no key file: name the one inside
    Case("keyfile-is-a-directory-holding-one", [("{kf}: (file): found a directory, expected a key file of NAME=value "
                                                "lines. Hint: name the key file itself: --keyfile {kf}/.env.taotoken")],
         keyfile_kind="dir", files={"keys.env/.env.taotoken": GOOD_KEYFILE}),
    Case("keyfile-dangling-symlink", ["{kf}: (file): found a symlink to nothing ({root}/gone.env), expected a key "
                                      "file (or a link to one). " + H_KEYFILE], keyfile_kind="dangling"),
    Case("keyfile-looping-symlink", ["{kf}: (file): found a symlink that loops, expected a key file (or a link to "
                                     "one). " + H_KEYFILE], keyfile_kind="loop"),
    Case("keyfile-named-but-missing", ["{kf}: (file): found no such file, expected the key file you named. "
                                       + H_KEYFILE + "; without one, leave out --keyfile and $HERMES_KEYFILE for "
                                       "offline mode"], keyfile_kind="missing"),
    Case("keyfile-env-var-missing", ["{kf}: (file): found no such file, expected the key file you named. "
                                     + H_KEYFILE + "; without one, leave out --keyfile and $HERMES_KEYFILE for "
                                     "offline mode"], keyfile_kind="missing", env={"HERMES_KEYFILE": "{kf}"}),
    Case("keyfile-env-var-directory", ["{kf}: (file): found a directory, expected a key file of NAME=value lines. "
                                       + H_KEYDIR], keyfile_kind="dir", env={"HERMES_KEYFILE": "{kf}"}),
    # ---- TAOTOKEN_BASE_URL beyond the /v1 rule
    url_case("base-url-space-inside", "https://taotoken.net/my api",
             "a URL with a space inside ('https://taotoken.net/my api')", "a URL without spaces",
             "retype it, e.g. https://taotoken.net/api"),
    url_case("base-url-query", "https://taotoken.net/api?region=cn", "https://taotoken.net/api?region=…",
             "the gateway root without ?query or #fragment",
             "set TAOTOKEN_BASE_URL=https://taotoken.net/api; clients append paths to it"),
    url_case("base-url-fragment", "https://taotoken.net/api#docs", "https://taotoken.net/api#docs",
             "the gateway root without ?query or #fragment",
             "set TAOTOKEN_BASE_URL=https://taotoken.net/api; clients append paths to it"),
    url_case("base-url-upper-v1", "https://taotoken.net/api/V1", "https://taotoken.net/api/V1",
             "the gateway root without /v1",
             "set TAOTOKEN_BASE_URL=https://taotoken.net/api; hermes-stack adds /v1 for OpenAI-style clients"),
    url_case("base-url-chat-endpoint", "https://taotoken.net/api/v1/chat/completions",
             "https://taotoken.net/api/v1/chat/completions", "the gateway root, not an endpoint",
             "set TAOTOKEN_BASE_URL=https://taotoken.net/api; clients add /v1/chat/completions themselves"),
    url_case("base-url-messages-endpoint", "https://taotoken.net/api/v1/messages",
             "https://taotoken.net/api/v1/messages", "the gateway root, not an endpoint",
             "set TAOTOKEN_BASE_URL=https://taotoken.net/api; clients add /v1/messages themselves"),
    url_case("base-url-endpoint-no-v1", "https://taotoken.net/api/chat/completions",
             "https://taotoken.net/api/chat/completions", "the gateway root, not an endpoint",
             "set TAOTOKEN_BASE_URL=https://taotoken.net/api; clients add /v1/chat/completions themselves"),
    # ---- non-finite and absurd numbers: every numeric field has a finite, sane range
    toml_number("temperature-inf", "temperature = 0.8", "temperature = inf", "rollout.temperature", "inf", FINITE,
                TEMPERATURE),
    toml_number("temperature-nan", "temperature = 0.8", "temperature = nan", "rollout.temperature", "nan", FINITE,
                TEMPERATURE),
    toml_number("temperature-5", "temperature = 0.8", "temperature = 5.0", "rollout.temperature", "5.0",
                "expected less than or equal to 2", TEMPERATURE),
    toml_number("kl-coef-inf", "kl_coef = 0.1", "kl_coef = inf", "algorithm.kl_coef", "inf", FINITE,
                "weight of the KL regulariser to the reference model"),
    toml_number("judge-timeout-inf", "format_weight = 0.1", "format_weight = 0.1\njudge_timeout_s = inf",
                "reward.judge_timeout_s", "inf", FINITE, JUDGE_TIMEOUT),
    toml_number("judge-timeout-week", "format_weight = 0.1", "format_weight = 0.1\njudge_timeout_s = 604800.0",
                "reward.judge_timeout_s", "604800.0", "expected less than or equal to 3600", JUDGE_TIMEOUT),
    toml_number("batch-size-1e30-cpu", "batch_size = 32", "batch_size = 1000000000000000000000000000000",
                "rollout.batch_size", "1000000000000000000000000000000", "expected less than or equal to 65536",
                "prompts (groups) per training step"),
    toml_number("max-samples-huge", "max_samples = 1000", "max_samples = 1000000000000", "environment.max_samples",
                "1000000000000", "expected less than or equal to 10000000", "rows taken from the split (shuffled by seed)"),
    toml_number("max-token-length-huge", "max_token_length = 2048", "max_token_length = 100000000",
                "rollout.max_token_length", "100000000", "expected less than or equal to 1048576",
                "per-sequence limit for rollouts (prompt + completion)"),
    toml_number("ppo-gamma-inf", "gamma = 1.0", "gamma = inf", "algorithm.gamma", "inf", FINITE,
                "discount (PPO's GAE; GRPO ignores it)", algo="ppo"),
    toml_number("entropy-coef-5", "entropy_coef = 0.0", "entropy_coef = 5.0", "algorithm.entropy_coef", "5.0",
                "expected less than or equal to 1", "weight of the entropy bonus"),
    toml_number("format-weight-negative-inf", "format_weight = 0.1", "format_weight = -inf", "reward.format_weight",
                "-inf", FINITE, "reward for the `#### N` answer format"),
    json_number("num-steps-1e30", "trainer.num_steps", 10**30, "1000000000000000000000000000000",
                "expected less than or equal to 10000000", "training steps"),
    json_number("learning-rate-inf-unlocked", "tinker.learning_rate", float("inf"), "inf", FINITE, LEARNING_RATE,
                args=UNLOCK),
    json_number("learning-rate-2-unlocked", "tinker.learning_rate", 2.0, "2.0", "expected less than or equal to 1",
                LEARNING_RATE, args=UNLOCK),
    json_number("lora-rank-huge-unlocked", "tinker.lora_rank", 10**6, "1000000",
                "expected less than or equal to 4096", "the LoRA adapter's rank (locked: the seed's value)", args=UNLOCK),
    json_number("settings-kl-coef-nan", "algorithm.kl_coef", float("nan"), "nan", FINITE,
                "mirror of [algorithm] kl_coef"),
    json_number("checkpoint-interval-huge", "tinker.save_checkpoint_interval", 10**12, "1000000000000",
                "expected less than or equal to 10000000", "steps between checkpoints"),
    Case("gpu-memory-inf", [("command line: --gpu-memory: found inf, expected GiB of one GPU, e.g. 24 or 80. Hint: the "
                             "memory budget compares against this")], args=["--gpu-memory", "inf"]),
    Case("gpu-memory-nan", [("command line: --gpu-memory: found nan, expected GiB of one GPU, e.g. 24 or 80. Hint: the "
                             "memory budget compares against this")], args=["--gpu-memory", "nan"]),
    # ---- dataset (GPU profile): the file must exist and every row must be gsm8k-shaped
    Case("dataset-missing", [("{toml}: [environment] dataset: found 'rows.jsonl' (no such file: {cdir}/rows.jsonl, "
                              "rows.jsonl), expected \"gsm8k\", \"offline-arith\" or an existing JSONL file. Hint: "
                              "relative paths are looked up next to the config files, then in the working directory")],
         toml=[('dataset = "gsm8k"', 'dataset = "rows.jsonl"')], args=GPU200),
    Case("dataset-row-without-question", ["{cdir}/rows.jsonl:2: question: found no question, expected a string. "
                                          + H_ROW],
         toml=[('dataset = "gsm8k"', 'dataset = "rows.jsonl"')], args=GPU200,
         files={"configs/rows.jsonl": '{"question": "1+1?", "answer": "#### 2"}\n{"prompt": "2+2?", '
                '"answer": "#### 4"}\n'}),
    Case("dataset-row-without-answer", [("{cdir}/rows.jsonl:1: answer: found no answer, expected a string ending in "
                                         "\"#### N\". Hint: gsm8k's shape: the reference number after ####")],
         toml=[('dataset = "gsm8k"', 'dataset = "rows.jsonl"')], args=GPU200,
         files={"configs/rows.jsonl": '{"question": "1+1?", "solution": "2"}\n'}),
    Case("dataset-answer-without-marker", [("{cdir}/rows.jsonl:1: answer: found '2', expected a string ending in "
                                            "\"#### N\". Hint: gsm8k's shape: the reference number after ####")],
         toml=[('dataset = "gsm8k"', 'dataset = "rows.jsonl"')], args=GPU200,
         files={"configs/rows.jsonl": '{"question": "1+1?", "answer": "2"}\n'}),
    Case("dataset-row-not-json", [("{cdir}/rows.jsonl:1: line: found invalid JSON (Expecting value): "
                                   "'question,answer', expected one JSON object per line. Hint: JSONL is one JSON "
                                   'object per line, like {{"question": "…", "answer": "… #### 42"}}; a CSV or other '
                                   "table must be converted to that first")],
         toml=[('dataset = "gsm8k"', 'dataset = "rows.jsonl"')], args=GPU200,
         files={"configs/rows.jsonl": "question,answer\n"}),
    # ---- model_path: a local folder must exist and hold a readable config.json (GPU profile)
    Case("model-folder-missing", [("{json}: inference.model_path: found './models/hermes-base' (no such folder: "
                                   "{root}/models/hermes-base), expected a local model folder holding config.json "
                                   "and the weights. Hint: copy or link the model there, or name a hub model such as "
                                   "Qwen/Qwen3-8B")],
         json={"inference.model_path": "./models/hermes-base"}, args=GPU200),
    # Named by the setting the user wrote (issue 25), the derived config.json in found.
    Case("model-config-not-json", ["{json}: inference.model_path: found './models/m' (models/m/config.json: a file that "
                                   "is not JSON (JSONDecodeError)), expected a model folder holding a Hugging Face "
                                   "config.json. " + H_MODEL],
         json={"inference.model_path": "./models/m"}, files={"models/m/config.json": "{hidden_size: 4096"},
         args=GPU200),
    Case("model-config-missing-field", ["{json}: inference.model_path: found './models/m' (models/m/config.json: no "
                                        "num_hidden_layers), expected a model folder whose config.json has "
                                        "num_hidden_layers as a positive integer. " + H_MODEL],
         json={"inference.model_path": "./models/m"}, files={"models/m/config.json": model(num_hidden_layers=DELETE)},
         args=GPU200),
    Case("model-config-zero-heads", ["{json}: inference.model_path: found './models/m' (models/m/config.json: "
                                     "num_attention_heads 0), expected a model folder whose config.json has "
                                     "num_attention_heads as a positive integer. " + H_MODEL],
         json={"inference.model_path": "./models/m"}, files={"models/m/config.json": model(num_attention_heads=0)},
         args=GPU200),
    Case("model-config-no-config-json", ["{json}: inference.model_path: found './models/m' (models/m/config.json: no "
                                         "such file), expected a model folder holding the model's config.json. "
                                         + H_MODEL],
         json={"inference.model_path": "./models/m"}, files={"models/m/weights.safetensors": b"\0"}, args=GPU200),
    # ---- checkpoint_dir stays inside the data volume
    json_number("checkpoint-dir-escapes", "tinker.checkpoint_dir", "../../../etc", "'../../../etc'", H_CKPT),
    json_number("checkpoint-dir-absolute-elsewhere", "tinker.checkpoint_dir", "/etc/ckpt", "'/etc/ckpt'", H_CKPT),
    json_number("checkpoint-dir-home", "tinker.checkpoint_dir", "~/ckpt", "'~/ckpt'", H_CKPT),
    # ---- Tinker key that is only its prefix
    Case("tinker-key-only-prefix", [("{kf}: TINKER_API_KEY: found only the prefix tml- and 0 more characters, expected "
                                     "a whole Tinker key (tml- followed by the key itself). Hint: copy the whole key "
                                     "from the Tinker console")],
         json={"trainer.engine": "tinker"}, keyfile=GOOD_KEYFILE + "TINKER_API_KEY=tml-\n", args=GPU200,
         toml=[("temperature = 0.8", "temperature = 1.0")]),
    # ---- weak messages made clear: bytes, BOMs, names, duplicates
    Case("json-not-utf8", [("{json}:3: (file): found a byte that is not UTF-8 (0xe9), expected UTF-8 text. Hint: "
                           "retype that line, or save the file as UTF-8")],
         json_text=lambda text: text.replace('"lora_rank"', '"lora_rank\udce9"')),
    Case("keyfile-not-utf8", [("{kf}:3: (file): found a byte that is not UTF-8 (0xff), expected UTF-8 text. Hint: "
                              "retype that line, or save the file as UTF-8")],
         keyfile=GOOD_KEYFILE.replace("m1", "m\udcff")),
    Case("toml-bom", [('{toml}:1: (file): found a UTF-8 byte-order mark (BOM) at the start, expected UTF-8 without a '
                      'BOM. Hint: save the file as "UTF-8", not "UTF-8 with BOM"')], toml_bom=True),
    Case("json-bom", [('{json}:1: (file): found a UTF-8 byte-order mark (BOM) at the start, expected UTF-8 without a '
                      'BOM. Hint: save the file as "UTF-8", not "UTF-8 with BOM"')],
         json_text=lambda text: "\ufeff" + text),
    Case("keyfile-bom", [('{kf}:1: (file): found a UTF-8 byte-order mark (BOM) at the start, expected UTF-8 without a '
                         'BOM. Hint: save the file as "UTF-8", not "UTF-8 with BOM"')], keyfile="\ufeff" + GOOD_KEYFILE),
    Case("keyfile-lowercase-name", ["{kf}:1: taotoken_api_key: found an unknown name, "
                                    + H_NAME.format(near="TAOTOKEN_API_KEY")],
         keyfile=GOOD_KEYFILE.replace("TAOTOKEN_API_KEY", "taotoken_api_key")),
    Case("keyfile-cyrillic-lookalike", [("{kf}:1: T\\u0410OTOKEN_API_KEY: found an unknown name (non-ASCII letters), "
                                         + H_NAME.format(near="TAOTOKEN_API_KEY"))],
         keyfile=GOOD_KEYFILE.replace("TAOTOKEN_API_KEY", "T\u0410OTOKEN_API_KEY")),
    Case("keyfile-typo-name", ["{kf}:2: TAOTOKEN_BASE_ULR: found an unknown name, "
                               + H_NAME.format(near="TAOTOKEN_BASE_URL")],
         keyfile=GOOD_KEYFILE.replace("TAOTOKEN_BASE_URL", "TAOTOKEN_BASE_ULR")),
    Case("keyfile-tinker-apikey", ["{kf}:4: TINKER_APIKEY: found an unknown name, "
                                   + H_NAME.format(near="TINKER_API_KEY")],
         keyfile=GOOD_KEYFILE + "TINKER_APIKEY=tml-abcdef0123456789\n"),
    Case("keyfile-duplicate-name", [("{kf}:4: TAOTOKEN_API_KEY: found a second TAOTOKEN_API_KEY line (the first is "
                                     "line 1), expected each name once. Hint: delete one of the two; the last one "
                                     "would win without a word")],
         keyfile=GOOD_KEYFILE + "TAOTOKEN_API_KEY=sk-other-0123456789abcdef\n"),
    Case("json-duplicate-key", [("{json}:{line}: port: found a second \"port\" (the first is on line 11), expected "
                                 "each key once per object. Hint: delete one of the two; JSON would keep the last one "
                                 "silently")],
         json_text=lambda text: text.replace('"port": 8001,', '"port": 8001,\n    "port": 8002,'),
         line_of='"port": 8002', col_after=""),
    Case("api-key-env-is-the-url", [("{json}: inference.api_key_env: found 'TAOTOKEN_BASE_URL', expected the name of a "
                                     "secret variable (a key, not a URL or a model name). Hint: leave it at "
                                     "HERMES_INFERENCE_KEY (generated unless the key file sets it), or name another "
                                     "key of the key file")],
         json={"inference.api_key_env": "TAOTOKEN_BASE_URL"}, keyfile=GOOD_KEYFILE),
    Case("api-key-env-is-the-model", [("{json}: inference.api_key_env: found 'TAOTOKEN_MODEL', expected the name of a "
                                       "secret variable (a key, not a URL or a model name). Hint: leave it at "
                                       "HERMES_INFERENCE_KEY (generated unless the key file sets it), or name "
                                       "another key of the key file")],
         json={"inference.api_key_env": "TAOTOKEN_MODEL"}, keyfile=GOOD_KEYFILE),
    # ---- keys a real key never is (issue 15): the blog's placeholder, non-ASCII, spaces
    Case("blog-placeholder-key", [("{kf}:1: TAOTOKEN_API_KEY: found the example's placeholder, not a key, expected "
                                   "your real key. " + H_KEYPASTE + "; until then, remove the file to run offline")],
         keyfile=GOOD_KEYFILE.replace(KEY, "sk-你的实际key")),
    Case("example-placeholder-key", [("{kf}:1: TAOTOKEN_API_KEY: found the example's placeholder, not a key, expected "
                                      "your real key. " + H_KEYPASTE + "; until then, remove the file to run "
                                      "offline")], keyfile=GOOD_KEYFILE.replace(KEY, "sk-replace-me")),
    Case("key-non-ascii", [("{kf}:1: TAOTOKEN_API_KEY: found a value with non-ASCII characters, expected a key of "
                            "ASCII letters, digits, '-', '_' and '.'. " + H_KEYPASTE)],
         keyfile=GOOD_KEYFILE.replace(KEY, "sk-test-0123456789abcdéf")),
    Case("key-space-inside", [("{kf}:1: TAOTOKEN_API_KEY: found a value with a space or a control character inside, "
                               "expected a key of ASCII letters, digits, '-', '_' and '.'. " + H_KEYPASTE)],
         keyfile=GOOD_KEYFILE.replace(KEY, "sk-test-01234 56789abcdef")),
    Case("wandb-key-non-ascii", [("{kf}:4: WANDB_API_KEY: found a value with non-ASCII characters, expected a key of "
                                  "ASCII letters, digits, '-', '_' and '.'. Hint: paste the key from your account page over "
                                  "the whole value of WANDB_API_KEY")],
         keyfile=GOOD_KEYFILE + "WANDB_API_KEY=wandb-ключ-0123456789\n"),
    # ---- the blog's PPO settings shape: value_loss_coef is checked against the TOML, like kl_coef
    Case("ppo-settings-value-loss-disagrees", [("{json}: algorithm.value_loss_coef: found 0.25, expected 0.5 "
                                                "([algorithm] value_loss_coef in {toml}). Hint: the two files must "
                                                "agree; change one of them")],
         algo="ppo", json={"algorithm.value_loss_coef": 0.25, "algorithm.group_size": DELETE}),
    Case("log-level-unknown-any-case", [("{toml}: atropos.log_level: found \"VERBOSE\", expected 'debug', 'info', "
                                        "'warning' or 'error'." + H_LOG)], toml=[('log_level = "info"', 'log_level = "VERBOSE"')]),
]


def test_there_are_at_least_100_distinct_bad_inputs():
    ids = [c.id for c in ROUND_1 + CASES]
    assert len(set(ids)) == len(ids) >= 100


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_each_exit_2_nothing_started(case, tmp_path, monkeypatch, capsys, compose_calls):
    err = run_case(case, tmp_path, monkeypatch, capsys, compose_calls)
    assert "Traceback" not in err and "unexpected error" not in err
