"""Every validation rule, one named function each: `rule(inputs) -> list[Problem]`.

A rule returns errors as `Problem` and advice as `Caution` (a Problem that prints as a warning and keeps exit 0).
`check(inputs)` runs them all and returns every finding at once; nothing stops at the first one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from hermes_stack.config.models import LOCKED_FIELDS, AlgoConfig, Settings
from hermes_stack.config.profiles import MIRRORED
from hermes_stack.errors import InputError, Problem
from hermes_stack.hub import HUB_ID_RULE, hub_id_flaw, is_hub_id
from hermes_stack.keyfile import KeyFile, check_tinker_key
from hermes_stack.redaction import is_keyfile_secret, looks_like_a_key, redact
from hermes_stack.secret_files import INFERENCE_KEY_ENV  # inference.api_key_env's default: that line is optional
from hermes_stack.service_defaults import DATA_DIR
from hermes_stack.textfile import path_unusable


@dataclass(frozen=True)
class Caution(Problem):
    """A finding that is printed as a warning; it does not make the configuration invalid."""


@dataclass(frozen=True)
class Inputs:
    algo: str
    config: AlgoConfig
    settings: Settings
    config_file: str
    settings_file: str
    keyfile: KeyFile | None = None
    unlock: bool = False
    # GPU-only rules (memory budget) run when profile == "gpu".
    profile: str = "gpu"
    gpu_memory_gib: float | None = None
    # Where a relative inference.model_path is looked up besides the working directory.
    base_dir: Path | None = None


Rule = Callable[[Inputs], list[Problem]]


# ---------------------------------------------------------------- algorithm choice


def algo_matches_files(i: Inputs) -> list[Problem]:
    """`--algo grpo` with a file whose [algorithm] name is ppo (or the reverse) is refused."""
    out = []
    other = "ppo" if i.algo == "grpo" else "grpo"
    if i.config.algorithm.name != i.algo:
        out.append(Problem(i.config_file, "algorithm.name", repr(i.config.algorithm.name),
                           f"{i.algo!r} (from --algo {i.algo})",
                           f"run with --algo {i.config.algorithm.name}, or restore name = \"{i.algo}\"; "
                           f"the {other} files are config_{other}.toml/settings_{other}.json"))
    if i.settings.algorithm.name != i.algo:
        out.append(Problem(i.settings_file, "algorithm.name", repr(i.settings.algorithm.name),
                           f"{i.algo!r} (from --algo {i.algo})",
                           f"set \"name\": \"{i.algo}\" in {i.settings_file}"))
    return out


# ---------------------------------------------------------------- PPO


def ppo_group_size(i: Inputs) -> list[Problem]:
    g = i.config.rollout.group_size
    if i.algo != "ppo" or g == 1:
        return []
    return [Problem(i.config_file, "rollout.group_size", str(g), "1 for PPO",
                    "PPO samples one completion per prompt; use --algo grpo for groups")]


def ppo_advantage_estimator(i: Inputs) -> list[Problem]:
    a = i.config.algorithm.advantage_estimator
    if i.algo != "ppo" or a == "gae":
        return []
    return [Problem(i.config_file, "algorithm.advantage_estimator", repr(a), "'gae' for PPO",
                    "PPO's advantages come from the critic via GAE; group_relative needs groups (GRPO)")]


def ppo_value_loss_coef(i: Inputs) -> list[Problem]:
    v = i.config.algorithm.value_loss_coef
    if i.algo != "ppo" or v > 0:
        return []
    return [Problem(i.config_file, "algorithm.value_loss_coef", str(v), "a value > 0 for PPO",
                    "without a critic loss the value head never learns and GAE advantages are noise; try 0.5")]


def ppo_gamma_lam(i: Inputs) -> list[Problem]:
    if i.algo != "ppo":
        return []
    out = []
    for name in ("gamma", "lam"):
        v = getattr(i.config.algorithm, name)
        if not 0 < v <= 1:
            out.append(Problem(i.config_file, f"algorithm.{name}", str(v), "a value in (0, 1]",
                               "PPO's seed uses gamma 1.0 and lam 0.95"))
    return out


# ---------------------------------------------------------------- GRPO


def grpo_group_size(i: Inputs) -> list[Problem]:
    g = i.config.rollout.group_size
    if i.algo != "grpo" or g >= 4:
        return []
    if g >= 2:
        return [Caution(i.config_file, "rollout.group_size", str(g), "4 or more for GRPO",
                        "with fewer completions per prompt the group mean is a noisy baseline")]
    return [Problem(i.config_file, "rollout.group_size", str(g), "2 or more for GRPO",
                    "a group of one has no relative advantage; the seed uses 8")]


def grpo_advantage_estimator(i: Inputs) -> list[Problem]:
    a = i.config.algorithm.advantage_estimator
    if i.algo != "grpo" or a == "group_relative":
        return []
    return [Problem(i.config_file, "algorithm.advantage_estimator", repr(a), "'group_relative' for GRPO",
                    "GRPO has no critic, so GAE gives zero advantages and the reward curve lies flat")]


def grpo_value_loss_coef(i: Inputs) -> list[Problem]:
    v = i.config.algorithm.value_loss_coef
    if i.algo != "grpo" or v == 0:
        return []
    return [Problem(i.config_file, "algorithm.value_loss_coef", str(v), "0 for GRPO",
                    "GRPO trains no critic; a value loss only adds noise")]


def grpo_gamma_lam(i: Inputs) -> list[Problem]:
    """Advice only: GRPO has no GAE, so gamma and lam are unused. Said when the file sets them to something other
    than 1; a value left out (lam defaults to PPO's 0.95) says nothing. The trainer never refuses them."""
    if i.algo != "grpo":
        return []
    section = i.config.algorithm
    return [Caution(i.config_file, f"algorithm.{name}", str(getattr(section, name)), "1 or nothing for GRPO",
                    f"GRPO has no GAE and ignores {name}; remove it or set it to 1.0")
            for name in ("gamma", "lam") if name in section.model_fields_set and getattr(section, name) != 1]


def kl_anchor(i: Inputs) -> list[Problem]:
    """Advice: without a KL anchor to the initial policy RL collapses to one answer."""
    if i.config.algorithm.kl_coef > 0:
        return []
    return [Caution(i.config_file, "algorithm.kl_coef", "0", "a value > 0 (the seed uses 0.1)",
                    "without a KL anchor the policy tends to collapse to one constant answer")]


# ---------------------------------------------------------------- the two files agree


def settings_agree_with_config(i: Inputs) -> list[Problem]:
    """settings.json's algorithm group_size/kl_coef/value_loss_coef must equal config.toml's when both files set them
    (the loader fills a value set in only one file into the other: that is no disagreement). The names agree through
    algo_matches_files: both must equal --algo, so a mismatch is reported once, there."""
    out = []
    for toml_key, settings_key in MIRRORED.items():
        section, name = toml_key.split(".")
        want = getattr(getattr(i.config, section), name)
        found = getattr(i.settings.algorithm, settings_key.split(".")[1])
        key, source = settings_key, f"[{section}] {name}"
        if found is not None and found != want:
            out.append(Problem(i.settings_file, key, repr(found), f"{want!r} ({source} in {i.config_file})",
                               "the two files must agree; change one of them"))
    return out


def _port(url: str) -> int | None:
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        if parts.port is not None:  # port 0 is a port (refused as one), not "none given"
            return parts.port
        return 443 if parts.scheme == "https" else 80
    except ValueError:
        return None


def atropos_port_agrees(i: Inputs) -> list[Problem]:
    """The URL services use to reach Atropos must point at [atropos] api_port (the seed's pitfall 4)."""
    url = i.settings.atropos.rollout_server_url
    port = _port(url)
    want = i.config.atropos.api_port
    if port is None:
        return [Problem(i.settings_file, "atropos.rollout_server_url", repr(url), f"an http URL like "
                        f"'http://localhost:{want}'", "the environment and the trainer reach Atropos here")]
    if port != want:
        return [Problem(i.settings_file, "atropos.rollout_server_url", f"port {port} ({url})",
                        f"port {want} ([atropos] api_port in {i.config_file})",
                        "the services would wait for an Atropos that is not there; change one of the two")]
    return []


def inference_port_agrees(i: Inputs) -> list[Problem]:
    """The URL the environment calls for rollouts must point at inference.port."""
    url = i.settings.inference.base_url
    port = _port(url)
    want = i.settings.inference.port
    if port is None:
        return [Problem(i.settings_file, "inference.base_url", repr(url),
                        f"an http URL like 'http://localhost:{want}/v1'", "the environment sends rollouts here")]
    if port != want:
        return [Problem(i.settings_file, "inference.base_url", f"port {port} ({url})",
                        f"port {want} (inference.port)", "the environment would call a port nobody serves")]
    return []


def inference_base_url_v1(i: Inputs) -> list[Problem]:
    """OpenAI-style base URL: ends in exactly one /v1 (a doubled or missing /v1 gives 404)."""
    url = i.settings.inference.base_url
    if _port(url) is None:
        return []  # inference_port_agrees reports the malformed URL once
    path = urlsplit(url).path
    if path.endswith("/v1") and not path.endswith("/v1/v1"):
        return []
    root = url.rstrip("/")
    while root.endswith("/v1"):
        root = root[: -len("/v1")]
    return [Problem(i.settings_file, "inference.base_url", repr(url), "a URL ending in exactly one /v1",
                    f"use '{root}/v1'; a doubled or missing /v1 answers 404")]


# ---------------------------------------------------------------- locked values, key file


def _get(settings: Settings, dotted: str) -> object:
    section, name = dotted.split(".")
    return getattr(getattr(settings, section), name)


def locked_fields(i: Inputs) -> list[Problem]:
    """The seed's hard-coded values (LOCKED_FIELDS) may only change with --unlock, which turns this into a warning."""
    out = []
    for key, seed in LOCKED_FIELDS.items():
        found = _get(i.settings, key)
        if found != seed:
            kind = Caution if i.unlock else Problem
            hint = ("unlocked with --unlock: you are off the tested path" if i.unlock
                    else f"restore {seed!r}, or pass --unlock (make up UNLOCK=1) if you mean to change it")
            out.append(kind(i.settings_file, key, repr(found), f"{seed!r} (locked)", hint))
    return out


_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def api_key_env_is_a_name(i: Inputs) -> list[Problem]:
    """inference.api_key_env holds a variable's NAME. The key itself pasted there sits in clear in every copy of the
    settings file (offline too, where no key file is read to compare with); anything else that is no name can
    never match a key-file line."""
    name = i.settings.inference.api_key_env
    if _VARIABLE_NAME.fullmatch(name):
        return []
    expected = f"the name of a key-file variable, e.g. {INFERENCE_KEY_ENV}"
    if looks_like_a_key(name):
        return [Problem(i.settings_file, "inference.api_key_env", f"a key ({redact(name)})", expected,
                        f"put the key in the key file as {INFERENCE_KEY_ENV}=… and leave api_key_env out (the "
                        f"default names it); a key in {i.settings_file} is in clear wherever the file is copied")]
    return [Problem(i.settings_file, "inference.api_key_env", repr(name), expected,
                    "a name is ASCII letters, digits and _, not starting with a digit")]


def keyfile_names(i: Inputs) -> list[Problem]:
    """inference.api_key_env names a variable that exists in the key file (skipped offline; the default,
    HERMES_INFERENCE_KEY, is optional: without the line the controller generates the inference key). A value that
    is no name at all is api_key_env_is_a_name's one line."""
    kf, name = i.keyfile, i.settings.inference.api_key_env
    if kf is None or kf.offline or not _VARIABLE_NAME.fullmatch(name):
        return []
    out = []
    if name != INFERENCE_KEY_ENV and not kf.values.get(name):
        present = ", ".join(sorted(kf.values)) or "nothing"
        out.append(Problem(i.settings_file, "inference.api_key_env", repr(name),
                           f"a variable set in {kf.path} ({present})",
                           f"add {name}=… to {kf.path} or name one of its variables"))
    if kf.values.get(name) and not is_keyfile_secret(name):
        # The value would become the inference key although every log and `validate` print it in clear.
        out.append(Problem(i.settings_file, "inference.api_key_env", repr(name),
                           "the name of a secret variable (a key, not a URL or a model name)",
                           f"leave it at {INFERENCE_KEY_ENV} (generated unless the key file sets it), or name "
                           "another key of the key file"))
    return out


GATEWAY_KEY_ENV = "TAOTOKEN_API_KEY"


def inference_key_is_not_the_gateway_key(i: Inputs) -> list[Problem]:
    """The paid gateway key must not double as the local inference service's key (it would reach its container):
    named by api_key_env, or pasted as the value of the variable it names. Neither value is ever shown."""
    name = i.settings.inference.api_key_env
    hint = "the paid gateway key would also protect the local inference service and reach its container"
    if name == GATEWAY_KEY_ENV:
        return [Caution(i.settings_file, "inference.api_key_env", repr(name),
                        f"{INFERENCE_KEY_ENV!r} (a key of its own, generated unless the key file sets it)", hint)]
    kf = i.keyfile
    if kf is None or kf.offline or not kf.values.get(name) or kf.values.get(name) != kf.values.get(GATEWAY_KEY_ENV):
        return []
    optional = name == INFERENCE_KEY_ENV  # without its line the controller generates one
    return [Caution(str(kf.path), name, f"the same value as {GATEWAY_KEY_ENV}",
                    "a key of its own" + (" (or no such line: one is then generated)" if optional else ""),
                    f"{hint}; " + (f"remove the {name} line or put another key on it" if optional
                                   else f"put another key on the {name} line"))]


GATEWAY_BASE_URL_ENV = "TAOTOKEN_BASE_URL"


def base_url_env_names_the_gateway_root(i: Inputs) -> list[Problem]:
    """The blog's inference.base_url_env names the variable holding the gateway's base URL. hermes-stack reads the
    gateway root from TAOTOKEN_BASE_URL only, so that name is accepted (the blog's value) and any other is refused:
    a different name would be silently ignored."""
    name = i.settings.inference.base_url_env
    if name == GATEWAY_BASE_URL_ENV:
        return []
    return [Problem(i.settings_file, "inference.base_url_env", repr(name), repr(GATEWAY_BASE_URL_ENV),
                    f"the gateway root is always read from {GATEWAY_BASE_URL_ENV} in the key file; set it there and "
                    f"write \"base_url_env\": \"{GATEWAY_BASE_URL_ENV}\" (or leave the key out)")]


def tinker_key(i: Inputs) -> list[Problem]:
    """The Tinker engine needs a real Tinker key (TINKER_API_KEY defaults to TAOTOKEN_API_KEY): named, or picked by
    "auto" on a GPU because the key file has a TINKER_API_KEY line (the shipped engine), where a gateway key pasted
    into that line used to pass validate and fail in the trainer after the build."""
    if i.keyfile is None or not tinker_engine_expected(i):
        return []
    problems = check_tinker_key(i.keyfile)
    if i.settings.trainer.engine == "auto":
        problems = [replace(p, hint=f"{p.hint}; or remove that line: engine \"auto\" then trains with torch")
                    for p in problems]
    return problems


def tinker_engine_expected(i: Inputs) -> bool:
    """The engine the trainer will run is Tinker: named, or "auto" on the gpu profile with a TINKER_API_KEY line in
    the key file (trainer/__main__.py engine_kind: the trainer sees TINKER_API_KEY only from such a line)."""
    engine = i.settings.trainer.engine
    if engine == "tinker":
        return True
    keyfile = i.keyfile
    return (engine == "auto" and i.profile == "gpu" and keyfile is not None and not keyfile.offline
            and not keyfile.tinker_key_defaulted and bool(keyfile.values.get("TINKER_API_KEY")))


def tinker_temperature(i: Inputs) -> list[Problem]:
    """Refused, not forced: Tinker's built-in losses (ppo, importance_sampling) compute the policy's log-probs at
    temperature 1, while the behaviour log-probs were sampled at [rollout] temperature, so at T != 1 the importance
    ratio compares two different distributions from the first step (GRPO's 0.8: every ratio off by the
    temperature's reshaping of each token's probability). The temperature is the user's exploration setting; changing
    it silently would train something else than the file says, so validate names both fixes instead."""
    t = i.config.rollout.temperature
    if t == 1.0 or not tinker_engine_expected(i):
        return []
    why = ("settings trainer.engine is \"tinker\"" if i.settings.trainer.engine == "tinker"
           else f"engine \"auto\" picks Tinker with the TINKER_API_KEY in {i.keyfile.path}")
    return [Problem(i.config_file, "rollout.temperature", f"{t:g} with the tinker engine ({why})",
                    "1.0 for the tinker engine",
                    "Tinker's losses take log-probs at temperature 1, so the importance ratio against rollouts "
                    "sampled at another temperature is wrong; set temperature = 1.0, or "
                    f"\"trainer\": {{\"engine\": \"torch\"}} in {i.settings_file}")]


def _chat_template_of(i: Inputs) -> str | None:
    """The local model folder's chat template (tokenizer_config.json or chat_template.jinja); None when there is
    no local folder or it has none. No network: a hub id is judged by its name (_thinking_model)."""
    import json

    directory = _model_dir(i)
    if directory is None:
        return None
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    try:
        template = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    return template if isinstance(template, str) else None


def _thinking_model(i: Inputs) -> bool:
    from hermes_stack.tasks.prompting import has_thinking_switch

    template = _chat_template_of(i)
    if template is not None:
        return has_thinking_switch(template)
    name = i.settings.inference.model_path.lower()
    return "qwen3" in name and "instruct-2507" not in name  # Qwen3's hybrid templates; 2507 Instruct never thinks


def thinking_budget(i: Inputs) -> list[Problem]:
    """[environment] enable_thinking = true on a thinking model needs room to think: Qwen3 reasons for thousands
    of tokens before `#### N`, and a completion cut at the budget scores 0 (and widens every padded batch)."""
    from hermes_stack.tasks.prompting import THINKING_MIN_TOKENS

    if not i.config.environment.enable_thinking or not _thinking_model(i):
        return []
    length = i.config.rollout.max_token_length
    if length >= THINKING_MIN_TOKENS:
        return []
    return [Problem(i.config_file, "rollout.max_token_length", f"{length} with enable_thinking = true on "
                    f"{i.settings.inference.model_path}", f">= {THINKING_MIN_TOKENS} for a thinking model",
                    "a thinking model reasons for thousands of tokens first and answers cut at the budget score 0; "
                    "raise max_token_length, or set [environment] enable_thinking = false")]


# ---------------------------------------------------------------- files the GPU profile reads (model, dataset)


def _looks_local(model_path: str) -> bool:
    """A path, not a hub name: the blog's "./models/hermes-base"; "Qwen/Qwen3-8B" is a hub name."""
    return model_path.startswith(("./", "../", "/", "~")) or model_path in (".", "..")


def _expanded(path: str) -> Path:
    """`path` with ~ expanded as a shell would; as written when ~user names no user here (expanduser raises)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def _model_candidates(i: Inputs) -> list[Path]:
    """Where `inference.model_path` may be: as written, then beside the settings (relative paths)."""
    path = _expanded(i.settings.inference.model_path)
    return [path] if path.is_absolute() else [path] + ([i.base_dir / path] if i.base_dir else [])


def _model_dir(i: Inputs) -> Path | None:
    """The local model folder that `inference.model_path` names, when one exists (a path the system refuses, such
    as a name over 255 bytes, names none: model_path_local says so)."""
    return next((c for c in _model_candidates(i) if path_unusable(c) is None and c.is_dir()), None)


def model_path_local(i: Inputs) -> list[Problem]:
    """On the GPU profile a local model folder must exist and hold a config.json SGLang and the memory budget can read
    (JSON, every shape field, positive numbers). A hub name that is not on disk is left to memory_budget."""
    from hermes_stack.config import memory

    if i.profile != "gpu":
        return []
    model = i.settings.inference.model_path
    if not model.strip():  # Path("") is the working folder, which has no config.json: say what is wrong instead
        return [Problem(i.settings_file, "inference.model_path", f"{model!r} (empty)",
                        f"a hub id ({HUB_ID_RULE}) or a local model folder",
                        "name the model, e.g. Qwen/Qwen3-8B, or its folder as ./path")]
    unusable = next((u for c in _model_candidates(i) if (u := path_unusable(c))), None)
    if unusable:
        return [Problem(i.settings_file, "inference.model_path", f"{unusable}: {model!r}",
                        f"a hub id ({HUB_ID_RULE}) or a local model folder",
                        "name the model's folder with a shorter path, e.g. ./models/<name>")]
    directory = _model_dir(i)
    if directory is None:
        # A hub name (org/name) is left to memory_budget; a path with more parts (models/m1/weights.bin) is no hub
        # name, and would otherwise pass here and fail in SGLang.
        if not (_looks_local(model) or ("/" in model and not is_hub_id(model, i.base_dir))):
            return []
        flaw = None if _looks_local(model) or model.count("/") != 1 else hub_id_flaw(model)
        if flaw is not None:
            # Written as owner/name but refused by the hub library (a stray full stop, a pasted newline): SGLang
            # could not download it, and huggingface_hub raises on it.
            return [Problem(i.settings_file, "inference.model_path",
                            f"{model!r} (no such folder, and no hub id: {flaw})",
                            f"a hub id ({HUB_ID_RULE}) or a local model folder",
                            "copy the id from the model's hub page, e.g. Qwen/Qwen3-8B; write a local folder as "
                            "./path")]
        where = _expanded(model)
        tried = str(where) if where.is_absolute() or i.base_dir is None else f"{i.base_dir / where}"
        if Path(tried).exists():  # a file (a weights file, config.json itself): the folder is the one above it
            return [Problem(i.settings_file, "inference.model_path", f"{model!r} (a file, not a folder: {tried})",
                            "a local model folder holding config.json and the weights",
                            f"name the folder that holds it: {Path(model).parent}")]
        return [Problem(i.settings_file, "inference.model_path", f"{model!r} (no such folder: {tried})",
                        "a local model folder holding config.json and the weights",
                        "copy or link the model there, or name a hub model such as Qwen/Qwen3-8B")]
    _, problems = memory.read_model_config(directory / "config.json")
    return [_as_model_path_problem(i, model, p) for p in problems]


def _as_model_path_problem(i: Inputs, model: str, p: Problem) -> Problem:
    """A config.json problem named by the setting the user wrote (inference.model_path), the derived file in found."""
    if p.key in ("(file)", "(top level)"):
        return Problem(i.settings_file, "inference.model_path", f"{model!r} ({p.file}: {p.found})",
                       f"a model folder holding {p.expected}", p.hint)
    detail = f"no {p.key}" if p.found == "nothing" else f"{p.key} {p.found}"
    return Problem(i.settings_file, "inference.model_path", f"{model!r} ({p.file}: {detail})",
                   f"a model folder whose config.json has {p.key} as {p.expected}", p.hint)


def dataset_file(i: Inputs) -> list[Problem]:
    """On the GPU profile a JSONL dataset must exist and every row must have a question and a "#### N" answer; the
    environment would otherwise fail after the stack started."""
    from hermes_stack.tasks import datasets

    dataset = i.config.environment.dataset
    if i.profile != "gpu" or dataset in datasets.BUILT_IN:
        return []
    base = Path(i.config_file).parent
    unusable = next((u for c in _dataset_candidates(dataset, base) if (u := path_unusable(c))), None)
    if unusable:
        return [Problem(i.config_file, datasets.KEY, f"{unusable}: {dataset!r}",
                        "a JSONL file inside the configs folder, or a built-in dataset",
                        "give the file a shorter name, e.g. configs/my_data.jsonl")]
    document = _json_document(dataset, base)
    if document is not None:
        return [Problem(str(document), "(file)", "a JSON document spread over several lines",
                        "JSONL: one JSON object per line", 'write each row on one line like {"question": "…", '
                        '"answer": "… #### 42"}')]
    try:
        counts = datasets.split_counts(dataset, base, i.config_file)  # one read: the rows, then both splits
    except InputError as exc:
        return list(exc.problems)
    return _dataset_as_the_environment_loads_it(i, dataset, counts)


def _dataset_candidates(dataset: str, base: Path) -> tuple[Path, ...]:
    """Where a dataset path may be: relative to the config directory, then to the working directory (what the
    environment does); an absolute path as it is."""
    path = Path(dataset)
    return (path,) if path.is_absolute() else (base / path, path)


def _json_document(dataset: str, base: Path) -> Path | None:
    """The dataset's path when it is a pretty-printed JSON document (a lone `[` or `{` first): one line says so
    instead of one per physical line."""
    found = next((c for c in _dataset_candidates(dataset, base) if c.is_file()), None)
    if found is None:
        return None
    try:
        with found.open(encoding="utf-8") as f:
            first = next((line.strip() for line in f if line.strip()), "")
    except (OSError, UnicodeDecodeError):
        return None
    return found if first in ("[", "{") else None


def _dataset_as_the_environment_loads_it(i: Inputs, dataset: str, counts: dict[str, int]) -> list[Problem]:
    """What the environment service does at start (environment/env.py setup): the file must hold rows for the run's
    split, for the other split (held-out evaluation) and for `fewshot` solved examples (train rows); `counts` are
    each split's rows as load_items splits them. Where the file is (inside configs/, which the containers see) is
    the controller's rule: dataset_in_configs."""
    from hermes_stack.tasks import datasets

    env = i.config.environment
    if not all(counts.values()):
        return [Problem(i.config_file, datasets.KEY, f"{dataset!r} with {counts['train']} train and {counts['test']} "
                        "test rows", "rows for both splits (training and held-out evaluation)",
                        "1 row in 10 (by a hash of the question) is test; add more rows")]
    if env.fewshot > counts["train"]:
        return [Problem(i.config_file, "environment.fewshot", str(env.fewshot),
                        f"at most the {counts['train']} train rows of {dataset}",
                        "the solved examples are train rows; lower fewshot or add rows")]
    return []


def dataset_in_configs(i: Inputs) -> list[Problem]:
    """For the controller (validate, up), not for a service loading its stack: a JSONL dataset the host can see must
    also be one the containers see, i.e. inside configs/ (compose mounts that folder alone, as /app/configs)."""
    from hermes_stack.tasks import datasets

    dataset = i.config.environment.dataset
    if i.profile != "gpu" or dataset in datasets.BUILT_IN or dataset_file(i):
        return []  # dataset_file names a missing or malformed file first (its read of the file is reused: cheap)
    base = Path(i.config_file).parent
    path = Path(dataset)
    found = next((c for c in _dataset_candidates(dataset, base) if c.is_file()), base / path)
    try:
        inside = found.resolve().is_relative_to(base.resolve())
    except OSError:
        inside = False
    if inside:
        return []
    return [Problem(i.config_file, datasets.KEY, f"{dataset!r} ({found.resolve()}, outside {base})",
                    f"a JSONL file inside {base}/", "the containers see only the configs/ folder (mounted as "
                    "/app/configs): move the file there and write its path relative to it")]


# The trainer's data volume inside its container (compose.base.yml mounts hermes-data there).
DATA_VOLUME = DATA_DIR  # the data volume inside the containers


# What the data volume holds besides checkpoints/ (compose.base.yml's hermes-data), each written by a service that
# owns it: weights/ holds step-<N> folders too, which the trainer prunes; metrics.jsonl is a file.
VOLUME_ENTRIES = {
    "weights": "the data volume's weights/, where the trainer exports and prunes step-<N> folders",
    "metrics.jsonl": "the trainer's metrics file on the data volume",
    "ready": "the data volume's ready/, the services' readiness markers",
    "dry-run": "the data volume's dry-run/, the dry-run's scratch folder",
}


# Where printable text is required: control characters (Cc: NUL, a newline, U+0085), format characters (Cf: a
# zero-width space, a right-to-left override U+202E that shows the text reversed) and the line and paragraph
# separators (Zl, Zp: U+2028 breaks the line in a log or a run page). Not only < 32 and 127.
INVISIBLE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")


def invisible(text: str) -> list[str]:
    """The characters of `text` that are not printable text (INVISIBLE_CATEGORIES), each once, in code order."""
    import unicodedata

    return sorted({c for c in text if unicodedata.category(c) in INVISIBLE_CATEGORIES})


def _listed(chars: list[str]) -> str:
    """"control character U+0000, U+000A"; "invisible character U+202E" when any is no control character."""
    import unicodedata

    kind = "control" if all(unicodedata.category(c) == "Cc" for c in chars) else "invisible"
    return f"{kind} character " + ", ".join(f"U+{ord(c):04X}" for c in chars)


def checkpoint_dir_on_volume(i: Inputs) -> list[Problem]:
    """Checkpoints live on the data volume: a relative path (under <data>/checkpoints) without `..`, or an absolute
    path under /data. Anything else would be lost with the container or write outside the volume. A control
    character (a NUL: mkdir raises; a pasted newline: a folder nobody can type), the volume's root or one of its
    other entries (VOLUME_ENTRIES) is no folder the trainer can keep checkpoints in either."""
    configured = i.settings.tinker.checkpoint_dir
    key = "tinker.checkpoint_dir"
    hint = "relative paths land in <data>/checkpoints/; the seed uses ./temp/"
    controls = invisible(configured)
    if controls:
        listed = _listed(controls)
        why = ("the trainer cannot create a folder with a NUL in its name" if "\x00" in controls
               else "it would name a folder nobody can see or type")
        return [Problem(i.settings_file, key, f"{_shown(configured)} ({listed})",
                        "a folder name of printable characters", f"remove the control character; {why}")]
    path = Path(configured)
    inside = (".." not in path.parts and configured.strip() != "" and not configured.startswith("~")
              and (not path.is_absolute() or path.parts[:2] == ("/", DATA_VOLUME.strip("/"))))
    if not inside:
        return [Problem(i.settings_file, key, repr(configured),
                        f"a folder inside the data volume (a relative path without .., or one under {DATA_VOLUME})",
                        hint)]
    rest = path.parts[2:] if path.is_absolute() else ("checkpoints",)
    taken = ("the data volume's root, beside weights/, metrics.jsonl and ready/" if not rest
             else VOLUME_ENTRIES.get(rest[0]))
    if taken is None:
        return []
    return [Problem(i.settings_file, key, f"{configured!r} ({taken})",
                    f"a folder of its own on the data volume (a relative path, or one under {DATA_VOLUME}/checkpoints)",
                    hint)]


# ---------------------------------------------------------------- the environment ([environment] name)


# One check()'s selections by (project, name): three rules read the selection, and each select() parses the whole
# environments/ folder. Scoped to the call, so a long-lived MCP server sees files the user edits between calls.
_SELECTIONS: ContextVar[dict | None] = ContextVar("selections", default=None)


def _selection(i: Inputs):
    from hermes_stack import environments_catalog

    if i.base_dir is None:
        return None
    key, cache = (i.base_dir, i.config.environment.name), _SELECTIONS.get()
    if cache is None:
        return environments_catalog.select(*key)
    if key not in cache:
        cache[key] = environments_catalog.select(*key)
    return cache[key]


def environment_selected(i: Inputs) -> list[Problem]:
    """`[environment] name` must name an environment: a built-in one, or exactly one BaseEnv subclass of the
    project's environments/ folder (read with ast, never run: hermes_stack/environments_catalog.py). The selected
    file must also import as the environment service imports it (its own lines: a byte Python refuses, a relative
    import)."""
    selection = _selection(i)
    if selection is None:
        return []
    if selection.shadowed:  # the built-in runs; the user's file of that name may be what they meant to run
        mine = selection.shadowed[0]
        name = i.config.environment.name
        return [Caution(i.config_file, "environment.name",
                        f"{name!r} (the built-in environment; {mine.file}:{mine.line} ({mine.class_name}) is named "
                        f"{name} too)", "the built-in environment or your file's path",
                        f"to run your file, set [environment] name = \"{mine.file}\": the bare name {name} is the "
                        "built-in's")]
    if selection.problem is None:
        return list(selection.problems)
    found, expected, hint = selection.problem
    return [Problem(i.config_file, "environment.name", found, expected, hint)]


def environment_imports(i: Inputs) -> list[Problem]:
    """Every module the selected environment file imports must be in the environment image (the standard library,
    our environment dependencies, environments/requirements.txt, the folder's own modules). An import a listed
    requirement that is not installed on this host may provide (scikit-learn's module is sklearn) is a warning
    naming what could not be checked, not an error: refusing a correct file is worse than a late import error."""
    from hermes_stack import environments_requirements

    selection = _selection(i)
    if selection is None or selection.environment is None or selection.environment.builtin:
        return []
    file = selection.environment.file
    name = i.config.environment.name
    # A file of the environment's folder named like an installed module (environments/datasets.py beside an
    # `import datasets`): the service puts that folder first on sys.path, so one is imported in place of the other.
    folder = Path(file).parent.as_posix()
    shadows = environments_requirements.shadowed_imports(i.base_dir, file, selection.reached_imports)
    out: list[Problem] = [
        Problem(f"{s.file}:{s.line}", "import", f"{s.module}, the name of both {s.entry} and a module the "
                "environment image installs", "a module name only one of them has",
                f"rename {s.entry} (and the imports of it): the environment service puts {folder}/ first on "
                f"sys.path, so one is imported in place of the other, for every library importing {s.module} too")
        for s in shadows]
    # `from module import name` of a name the module's text does not bind: likely an ImportError, read from its text.
    # A warning, not a refusal: a module can bind names its text does not show (setattr in a helper, a compiled
    # submodule, a global set in a function, an import guarded by `except (ImportError, …)`), and a valid environment
    # must never be refused. Not said of a shadowed module: renaming the file (said above) is the fix.
    shadowed = {s.module for s in shadows}
    for m in environments_requirements.missing_names(i.base_dir, file, selection.reached_names):
        if m.module.split(".")[0] in shadowed:
            continue
        where = m.source or "(read from this machine's installed copy)"
        found = (f"{m.name}, which {m.source} does not define" if m.source
                 else f"{m.name}, which {m.module} does not define {where}")
        hint = "check the spelling" + ("" if m.source else " and the installed version")
        out.append(Caution(f"{m.file}:{m.line}", "import", found, "names the module defines",
                           f"{hint}: unless the module binds it out of sight, Python stops at this import "
                           "(ImportError)"))
    check = environments_requirements.check_imports(i.base_dir, selection.imports)
    if check is None:
        return out
    if check.missing:
        listed = ", ".join(f"{module} ({file}:{line})" for module, line in check.missing)
        out.append(Problem(i.config_file, "environment.name", f"{name!r}, whose file imports {listed}",
                           "imports the environment image has",
                           f"add the package, pinned (name==version), to {environments_requirements.REQUIREMENTS} and "
                           "rebuild the images: make images (make up rebuilds them too)"))
    if check.unchecked:
        listed = ", ".join(f"{module} ({file}:{line})" for module, line in check.unchecked)
        shown = ", ".join(check.unknown[:3]) + (f" and {len(check.unknown) - 3} more" if len(check.unknown) > 3 else "")
        one = len(check.unknown) == 1
        out.append(Caution(i.config_file, "environment.name", f"{name!r}, whose file imports {listed}",
                           "imports the environment image has",
                           f"not checked: {shown} ({environments_requirements.REQUIREMENTS}) "
                           f"{'is' if one else 'are'} not installed on this host, so the modules "
                           f"{'it provides are' if one else 'they provide are'} unknown here; fine if "
                           f"{'it provides' if one else 'they provide'} these"))
    return out


def environment_readable_by_the_tiny_model(i: Inputs) -> list[Problem]:
    """Advice: a user's environment on the embedded profile's tiny model. Its tokenizer knows digits, `+ = #`, space
    and newline only (modelcore/embedded.py), and a sequence is rollout.max_token_length 16: any other prompt is
    <unk> tokens, cut. Some environments are made for it (sums like `47+2=`), so it is not refused."""
    from hermes_stack.modelcore.location import EMBEDDED_MODEL

    if i.profile != "embedded" or i.settings.inference.model_path != EMBEDDED_MODEL:
        return []
    selection = _selection(i)
    if selection is None or selection.environment is None or selection.environment.builtin:
        return []
    return [Caution(i.config_file, "environment.name",
                    f"{i.config.environment.name!r} on the embedded profile's tiny model",
                    f"prompts of digits and + = # within {i.config.rollout.max_token_length} tokens",
                    "its tokenizer knows only digits, + = # and blanks: fine for sums like 3+4=, but a prompt with "
                    "other characters arrives as <unk> tokens; for such a task train a real model on CPU with "
                    "--model smollm2-135m (make up MODEL=smollm2-135m), or use a GPU")]


def environment_group_size_replaced(i: Inputs) -> list[Problem]:
    """Advice: the user's config_init() sets its own group_size (a constant) and its code never reads the config's
    group_size, while the stack replaces it with [rollout] group_size (environment/user_env.py). Said only in the
    environment's log before: a file that assumes its own number of completions per group (`n=4`, fixed-size
    scoring) breaks at run time; one that reads self.config.group_size follows the stack's value and is not warned."""
    from hermes_stack import environments_catalog

    selection = _selection(i)
    if selection is None or selection.environment is None or selection.environment.builtin or i.base_dir is None:
        return []
    env = selection.environment
    try:
        source = (i.base_dir / env.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    found = environments_catalog.config_init_constant(source, env.class_name, "group_size")
    group = i.config.rollout.group_size
    if found is None or not isinstance(found[0], int) or isinstance(found[0], bool) or found[0] == group:
        return []
    return [Caution(f"{env.file}:{found[1]}", "group_size", f"{found[0]} in {env.class_name}.config_init()",
                    f"[rollout] group_size {group}, which the stack uses instead",
                    f"the environment runs with groups of {group} ([rollout] group_size in {i.config_file}); set "
                    "that to the file's number if its code counts on it")]


def environment_requirements_pinned(i: Inputs) -> list[Problem]:
    """environments/requirements.txt is installed into the environment image like requirements.lock: UTF-8 text,
    every line `name==version` (the whole set, dependencies included: it installs with --no-deps) with a version pip
    reads, one version per package, and the lock's version for a package the lock pins (it installs with -c
    requirements.lock). One line per requirements line (environments_requirements.requirement_problems)."""
    from hermes_stack import environments_requirements

    if i.base_dir is None:
        return []
    return environments_requirements.requirement_problems(i.base_dir)


# ---------------------------------------------------------------- settings valid alone, not together


def host_ports_distinct(i: Inputs) -> list[Problem]:
    """Atropos and inference each publish their port on the host (compose.base.yml): one port cannot take both."""
    port = i.settings.inference.port
    if port != i.config.atropos.api_port:
        return []
    return [Problem(i.settings_file, "inference.port", f"{port}, also [atropos] api_port in {i.config_file}",
                    "a port of its own", "two services cannot publish one host port; the seed uses 8000 for Atropos "
                    "and 8001 for inference")]


def grpo_groups_can_differ(i: Inputs) -> list[Problem]:
    """At temperature 0 every completion of a group is the same, so every group scores the same; GRPO drops such
    groups (no relative advantage) and the run never trains."""
    r = i.config.rollout
    if i.algo != "grpo" or r.temperature > 0 or r.group_size < 2:
        return []
    return [Problem(i.config_file, "rollout.temperature", f"{r.temperature} with group_size {r.group_size}",
                    "a temperature > 0 for GRPO (the seed uses 0.8)",
                    "greedy sampling gives a group identical completions and equal scores; GRPO drops every such "
                    "group, so nothing is learned")]


# Below this, sampling is close to greedy: a group's completions rarely differ (advice, not a refusal: how close
# depends on the model, and 0 itself is refused above).
NEAR_GREEDY = 0.1


def grpo_groups_likely_differ(i: Inputs) -> list[Problem]:
    """Advice: at a temperature or top_p near 0 a group's completions are nearly always the same, so GRPO drops most
    groups (equal scores, no relative advantage) and learns slowly if at all."""
    r = i.config.rollout
    if i.algo != "grpo" or r.group_size < 2:
        return []
    hint = ("near-greedy sampling gives a group near-identical completions; GRPO drops every group whose scores are "
            "all equal (the environment's log counts them)")
    out: list[Problem] = []
    if 0 < r.temperature < NEAR_GREEDY:
        out.append(Caution(i.config_file, "rollout.temperature", f"{r.temperature:g} with group_size {r.group_size}",
                           f"at least {NEAR_GREEDY} for GRPO (the seed uses 0.8)", hint))
    if r.top_p < NEAR_GREEDY:
        out.append(Caution(i.config_file, "rollout.top_p", f"{r.top_p:g} with group_size {r.group_size}",
                           f"at least {NEAR_GREEDY} for GRPO (the seed uses 0.95)", hint))
    return out


def ppo_samples(i: Inputs) -> list[Problem]:
    """Advice: PPO at temperature 0 samples greedily. It explores nothing, and its behaviour log-probs are the
    softmax at T = 1 (algorithms.py, sampling_core.py) while the tokens came from an argmax, so the importance ratio
    corrects for a policy that did not sample them. Not refused: the run still trains, poorly."""
    r = i.config.rollout
    if i.algo != "ppo" or r.temperature > 0:
        return []
    return [Caution(i.config_file, "rollout.temperature", f"{r.temperature:g} for PPO",
                    "a temperature > 0 (the seed uses 0.7)",
                    "greedy rollouts explore nothing, and the importance ratio reads them as samples of the policy "
                    "at temperature 1")]


def fewshot_needs_a_system_prompt(i: Inputs) -> list[Problem]:
    """Advice: solved examples are shown only after a system prompt (tasks/prompting.py messages); without one the
    question goes with the step-by-step instruction and `fewshot` does nothing."""
    env = i.config.environment
    if env.fewshot == 0 or env.system_prompt is not None:
        return []
    return [Caution(i.config_file, "environment.fewshot", f"{env.fewshot} without system_prompt",
                    "a system_prompt beside it (the solved examples follow the system message)",
                    "set [environment] system_prompt, or fewshot = 0: without a system prompt no example is shown")]


def system_prompt_leaves_room(i: Inputs) -> list[Problem]:
    """A system prompt too long for rollout.max_token_length, before anything starts. The environment counts every
    prompt's tokens when it starts (prompting.prompt_room), but that is after the build and the bring-up, and for a
    hub tokenizer only where the hub is reachable. Here no tokenizer is needed: the tokenizers we serve split text at
    whitespace before merging (the embedded model's, a token per character), so each word is at least one token and
    the words alone are a lower bound. Only where the prompt is sent: the built-in environment on a question dataset
    (offline-arith sends its bare sums; a user's own environment builds its own prompts)."""
    from hermes_stack.tasks.prompting import MIN_NEW_TOKENS

    if i.config.environment.dataset == "offline-arith":
        return []
    selection = _selection(i)
    if selection is not None and selection.environment is not None and not selection.environment.builtin:
        return []
    prompt = i.config.environment.system_prompt
    length = i.config.rollout.max_token_length
    words = len(prompt.split()) if prompt else 0
    if words <= length - 1 - MIN_NEW_TOKENS:
        return []
    return [Problem(i.config_file, "environment.system_prompt", f"{words} words (at least {words} tokens)",
                    f"a system prompt that leaves every prompt at least {MIN_NEW_TOKENS} new tokens within "
                    f"rollout.max_token_length {length}",
                    "shorten [environment] system_prompt (every prompt carries it), or raise rollout.max_token_length")]


def rollouts_fit_the_trainer(i: Inputs) -> list[Problem]:
    """The trainer registers tinker.max_token_trainer_length with Atropos as its max_token_len, and environments
    drop every group with a sequence at or above it: rollouts allowed to grow longer are silently thrown away."""
    width, limit = i.config.rollout.max_token_length, i.settings.tinker.max_token_trainer_length
    if i.profile != "gpu" or width <= limit:  # the CPU profiles set their own width (16; 112 for the real model)
        return []
    return [Problem(i.config_file, "rollout.max_token_length", f"{width} with tinker.max_token_trainer_length {limit} "
                    f"in {i.settings_file}", f"at most {limit}",
                    f"the trainer takes sequences below {limit} tokens and Atropos environments drop every group "
                    f"with a longer one; lower max_token_length (raising max_token_trainer_length needs --unlock)")]


def rewards_can_differ(i: Inputs) -> list[Problem]:
    """Both weights 0: every completion scores 0, so no completion is better than another (GRPO drops every group,
    PPO's advantages are the critic's noise) and nothing is learned."""
    r = i.config.reward
    if r.correctness_weight > 0 or r.format_weight > 0:
        return []
    return [Problem(i.config_file, "reward", "correctness_weight 0 and format_weight 0",
                    "at least one weight > 0 (the seed uses 1.0 and 0.1)",
                    "with both at 0 every reward is 0 and nothing is learned")]


def minibatches_fit_the_batch(i: Inputs) -> list[Problem]:
    """A pass cannot take more optimiser steps than the batch has sequences: each minibatch needs one."""
    r = i.config.rollout
    n, rows = i.settings.trainer.minibatches, r.sequences_per_step
    if n <= rows:
        return []
    return [Problem(i.settings_file, "trainer.minibatches", str(n),
                    f"at most the batch's {rows} sequences (batch_size {r.batch_size} x group_size {r.group_size})",
                    "each minibatch is an optimiser step on a share of one batch; 1 trains on the whole batch")]


def judge_needs_the_gateway(i: Inputs) -> list[Problem]:
    """The LLM judge calls the gateway; offline (no key file) or without TAOTOKEN_MODEL it cannot run."""
    kf = i.keyfile
    if not i.config.reward.judge or kf is None:
        return []
    if kf.offline:
        return [Problem(i.config_file, "reward.judge", "true while offline (no key file)",
                        "false, or a key file with the gateway's key",
                        f"the LLM judge calls the gateway; set judge = false or create {kf.path}")]
    if not kf.values.get("TAOTOKEN_MODEL"):
        return [Problem(i.config_file, "reward.judge", f"true without TAOTOKEN_MODEL in {kf.path}",
                        "false, or the judge's model named in the key file",
                        f"add TAOTOKEN_MODEL=… to {kf.path} or set judge = false")]
    return []


def checkpoint_interval_reached(i: Inputs) -> list[Problem]:
    """Advice: an interval beyond num_steps saves only the final step, so a run stopped early resumes from nothing.
    Harmless otherwise (the trainer always saves the last step), hence a warning."""
    interval, steps = i.settings.tinker.save_checkpoint_interval, i.settings.trainer.num_steps
    if interval <= steps:
        return []
    return [Caution(i.settings_file, "tinker.save_checkpoint_interval", str(interval),
                    f"at most trainer.num_steps ({steps})",
                    "the run saves only its final step; a run stopped before it resumes from nothing")]


# wandb's own checks of a project name (wandb_settings.validate_project) and its 128-character limit on names; the
# trainer registers project and group with Atropos and the environment registers name, whether wandb is on or not.
WANDB_LIMIT = 128
WANDB_PROJECT_REFUSES = "/\\#?%:"


def _shown(value: str) -> str:
    """A name as found: its start and its length when long (a pasted blob is not echoed whole)."""
    return repr(value) if len(value) <= 60 else f"{value[:40]!r}… ({len(value)} characters)"


def wandb_names(i: Inputs) -> list[Problem]:
    """wandb.project, group and name as wandb takes them. wandb.init refuses a project it cannot put in a URL or one
    over 128 characters; the trainer then trains without wandb, which the user learns from one log line. A control
    character (a NUL, a newline) or a pasted blob in any of them reaches Atropos and the run's page."""
    out: list[Problem] = []
    w = i.settings.wandb
    for field in ("project", "group", "name"):
        value = getattr(w, field)
        if value is None:
            continue
        key = f"wandb.{field}"
        controls = invisible(value)
        refused = sorted({c for c in value if c in WANDB_PROJECT_REFUSES}) if field == "project" else []
        if len(value) > WANDB_LIMIT:
            out.append(Problem(i.settings_file, key, _shown(value), f"at most {WANDB_LIMIT} characters (wandb's limit)",
                               "a shorter name; wandb refuses a longer one"))
        elif controls:
            out.append(Problem(i.settings_file, key, f"{_shown(value)} ({_listed(controls)})",
                               "printable text", "remove the control character; a name is one line of text"))
        elif refused:
            out.append(Problem(i.settings_file, key, _shown(value),
                               f"a project name without {' '.join(WANDB_PROJECT_REFUSES)}",
                               f"wandb refuses {' '.join(refused)} in a project name; use - or _ instead"))
    return out


def replicas_at_least_one(i: Inputs) -> list[Problem]:
    """inference.replicas counts servers: 0 would leave the router with nothing to route to."""
    n = i.settings.inference.replicas
    if n >= 1:
        return []
    return [Problem(i.settings_file, "inference.replicas", str(n), "an integer >= 1",
                    "the number of inference servers behind the router; 1 is one server, no router")]


def replicas_fit_gpus(count: int, gpus: int | None, where: str, key: str) -> list[Problem]:
    """On a GPU, replica i runs on GPU i (compose device ids): more replicas than GPUs would leave one without a
    GPU. `gpus` None: unknown (no nvidia-smi, no --gpu-memory), not checked. A controller rule: only `validate` and
    `up` know the machine's GPUs."""
    if gpus is None or count <= gpus:
        return []
    return [Problem(where, key, f"{count} replicas on {gpus} GPU{'s' if gpus != 1 else ''}",
                    f"at most {gpus}: one GPU per replica",
                    "each replica is pinned to its own GPU; lower inference.replicas (or REPLICAS=N), or run on a "
                    "machine with more GPUs (docs/scaling.md)")]


# ---------------------------------------------------------------- memory (GPU profile only)


def memory_budget(i: Inputs) -> list[Problem]:
    """SGLang's weights and KV cache, the trainer's weights, LoRA state and one micro-batch must share the GPU (the
    seed's pitfall 2: CUDA OOM). The split itself is printed by `validate` (config/memory.py)."""
    if i.profile != "gpu" or i.gpu_memory_gib is None:
        return []
    from hermes_stack.config import memory

    model = i.settings.inference.model_path
    if model_path_local(i):
        return []  # model_path_local says what is wrong with the folder; there is no shape to budget
    split = memory.split_for(i.config, i.settings, i.gpu_memory_gib, i.base_dir)
    if split is None:
        return [Caution(i.settings_file, "inference.model_path", repr(model),
                        "a local model directory with config.json, or a known model "
                        f"({', '.join(sorted(k for k in memory.KNOWN_SHAPES if not k.endswith('-instruct')))})",
                        "the GPU memory budget was not checked; for a hub model, `huggingface-cli download "
                        f"{model} config.json` puts its shape in this machine's cache")]
    refused = memory.split_refusal(split, i.settings.trainer.micro_batch_size)
    if refused is None:
        return []
    key, line = refused
    found = {"inference.model_path": repr(model), "trainer.micro_batch_size": str(split.micro_batch),
             "rollout.max_token_length": str(split.tokens)}[key]
    where = i.config_file if key.startswith("rollout.") else i.settings_file
    return [Problem(where, key, found, "a model and batch that fit the GPU next to SGLang", line)]


RULES: tuple[Rule, ...] = (
    algo_matches_files,
    ppo_group_size,
    ppo_advantage_estimator,
    ppo_value_loss_coef,
    ppo_gamma_lam,
    grpo_group_size,
    grpo_advantage_estimator,
    grpo_value_loss_coef,
    grpo_gamma_lam,
    kl_anchor,
    settings_agree_with_config,
    atropos_port_agrees,
    inference_port_agrees,
    inference_base_url_v1,
    locked_fields,
    api_key_env_is_a_name,
    keyfile_names,
    inference_key_is_not_the_gateway_key,
    base_url_env_names_the_gateway_root,
    tinker_key,
    tinker_temperature,
    thinking_budget,
    checkpoint_dir_on_volume,
    host_ports_distinct,
    replicas_at_least_one,
    grpo_groups_can_differ,
    grpo_groups_likely_differ,
    ppo_samples,
    fewshot_needs_a_system_prompt,
    system_prompt_leaves_room,
    rewards_can_differ,
    rollouts_fit_the_trainer,
    minibatches_fit_the_batch,
    judge_needs_the_gateway,
    checkpoint_interval_reached,
    wandb_names,
    model_path_local,
    dataset_file,
    environment_selected,
    environment_imports,
    environment_requirements_pinned,
    environment_readable_by_the_tiny_model,
    environment_group_size_replaced,
    memory_budget,
)


def check(i: Inputs, rules: tuple[Rule, ...] = RULES) -> tuple[list[Problem], list[Problem]]:
    """-> (errors, cautions), every rule run, duplicates removed, in rule order. A file whose [algorithm] name is
    the other algorithm's is that one finding alone: every other rule would judge, say, a PPO file copied over
    config_grpo.toml as a wrong GRPO file (group_size, gae, value_loss_coef...), burying the one fix."""
    if algo_matches_files in rules and (mismatch := algo_matches_files(i)):
        return mismatch, []
    errors: list[Problem] = []
    cautions: list[Problem] = []
    seen: set[Problem] = set()  # beside the lists, which keep rule order: `p not in list` was quadratic
    token = _SELECTIONS.set({})
    try:
        for rule in rules:
            if rule is algo_matches_files:  # just run above, and found nothing
                continue
            for p in rule(i):
                if p not in seen:
                    seen.add(p)
                    (cautions if isinstance(p, Caution) else errors).append(p)
    finally:
        _SELECTIONS.reset(token)
    return errors, cautions
