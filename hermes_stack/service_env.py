"""The contract between the controller and the services: every variable a service reads (docs/architecture.md, Runtime).

- `ServiceEnv`: every `HERMES_*` setting a service reads, typed, with its default. The services read their settings
  only through `ServiceEnv.from_environ()`; the controller builds compose's process environment from
  `ServiceEnv.for_stack(...).to_compose_env()`. Each field says where compose sets it (`COMPOSE_KIND`):
  "fixed" (a value written in compose.base.yml's `x-env`), "pass" (an `x-env` entry `${NAME:-default}`: the
  controller sets it, or the user in the shell that runs `up`), "algo" (compose.<algo>.yml's `x-algo`), "secret" (a
  Compose secret, hermes_stack.secret_files). tests/static/test_service_env_contract.py holds compose and the
  architecture doc to it.
- The key file's variables (RECEIVERS): the controller reads the one key file ($HERMES_KEYFILE, --keyfile, else
  .env.taotoken) and hands compose its values in compose's own process environment (never on the argv, never in a
  compose file). Compose gives each service only what it needs: secrets as Compose secrets
  (`secrets: {environment: VAR}`, files under /run/secrets, not in `docker inspect`; Engine 20.10 + Compose v2.40.3,
  tested), the non-secret names (base URLs, the gateway model) as plain `environment:` entries.

Not here: the controller's own variables (HERMES_ROOT, HERMES_PROJECT_NAME, HERMES_KEYFILE, HERMES_IMAGE_REPO,
HERMES_BASE_IMAGE, HERMES_SGLANG_IMAGE, HERMES_ATROPOS_PORT): they select what compose builds and runs, no service
reads them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError

from hermes_stack import service_defaults as defaults
from hermes_stack.algos import Algo
from hermes_stack.errors import InputError, Problem
from hermes_stack.keyfile_vars import READ
from hermes_stack.modelcore.catalog import DEFAULT_MODELS_DIR
from hermes_stack.secret_files import INFERENCE_KEY_ENV
from hermes_stack.service_log import LogLevel

if TYPE_CHECKING:
    from hermes_stack.config.loader import StackConfig

UNLOCK_ENV = "HERMES_UNLOCK"

# Key-file variables that are not secret and travel as plain environment entries (hermes_stack.keyfile_vars).
PLAIN = tuple(v.name for v in READ if not v.secret)
# Variable -> the services that receive it (compose.base.yml must agree: tests/static checks it).
RECEIVERS: dict[str, tuple[str, ...]] = {v.name: v.receivers for v in READ}

COMPOSE_KINDS = ("fixed", "pass", "algo", "secret")


def _var(alias: str, default: Any, compose: str, description: str, **constraints: Any) -> Any:
    """A field read from the variable `alias`; `compose` says where compose sets it (module docstring)."""
    assert compose in COMPOSE_KINDS, compose
    return Field(default, alias=alias, description=description, json_schema_extra={"compose": compose},
                 **constraints)


def _zero_or_one(value: Any) -> Any:
    # "1"/"0" only: "yes" or "true" would be a guess at what the controller meant.
    if isinstance(value, str) and value.strip() not in ("0", "1"):
        raise ValueError("0 or 1")
    return value.strip() == "1" if isinstance(value, str) else value


def _torch_device(value: Any) -> Any:
    # torch refuses any other at the first tensor, inside the container after the build
    if isinstance(value, str) and not re.fullmatch(r"cpu|cuda(:\d+)?", value.strip()):
        raise ValueError("cpu, cuda or cuda:N (a torch device)")
    return value.strip() if isinstance(value, str) else value


def _listen_address(value: Any) -> Any:
    # an address uvicorn can bind: a host name or an IPv4/IPv6 address, one word
    if isinstance(value, str) and not re.fullmatch(r"[A-Za-z0-9._-]+|\[?[0-9A-Fa-f:.]+\]?", value.strip()):
        raise ValueError("an address to listen on, e.g. 0.0.0.0, 127.0.0.1 or ::")
    return value.strip() if isinstance(value, str) else value


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


WEEK_S = 7 * 24 * 3600


class ServiceEnv(BaseModel):
    """The service environment: one field per variable (alias), its default outside compose, and its meaning."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore", allow_inf_nan=False)

    # -- which stack
    algo: Algo = _var("HERMES_ALGO", "grpo", "algo", "ppo or grpo: which config files")
    config_dir: Path = _var("HERMES_CONFIG_DIR", Path("configs"), "fixed",
                            "the config folder (compose: ./configs, read-only at /app/configs)")
    profile: Literal["gpu", "embedded"] = _var("HERMES_PROFILE", "gpu", "fixed",
                                               "gpu, or embedded (compose.cpu.yml: CPU, offline)")
    unlock: Annotated[bool, BeforeValidator(_zero_or_one)] = _var(
        UNLOCK_ENV, False, "pass", "1 when the controller ran with --unlock: the services load the configs with the "
        "same locked-field rule (no service unlocks on its own)")
    model: str | None = _var("HERMES_MODEL", None, "pass",
                             "the catalog model chosen with --model (empty: none); every service loads with it")
    # -- where things are
    atropos_url: str | None = _var("HERMES_ATROPOS_URL", None, "fixed",
                                   "Atropos (empty: settings atropos.rollout_server_url)")
    inference_url: str | None = _var("HERMES_INFERENCE_URL", None, "fixed",
                                     "the inference service, OpenAI style, ending in /v1 (empty: inference.base_url)")
    data_dir: Path | None = _var("HERMES_DATA_DIR", None, "fixed",
                                 "the shared data volume: checkpoints/, weights/, metrics.jsonl, ready/ markers")
    embedded_model: Path = _var("HERMES_EMBEDDED_MODEL", Path("/opt/hermes/embedded-model"), "fixed",
                                "the tiny model baked into the trainer image (inference.model_path \"embedded\")")
    models_dir: Path = _var("HERMES_MODELS_DIR", Path(DEFAULT_MODELS_DIR), "fixed",
                            "where the cpu images keep catalog models (environment image: tokenizers only)")
    # -- set by `up` from the validated configuration
    served_model_name: str | None = _var("HERMES_SERVED_MODEL_NAME", None, "pass",
                                         "the model name /v1/models lists (empty: inference.model_path)")
    inference_port: int | None = _var("HERMES_INFERENCE_PORT", None, "pass",
                                      "the inference service's port (empty: inference.port)", ge=1, le=65535)
    sglang_mem_fraction: float | None = _var("HERMES_SGLANG_MEM_FRACTION", None, "pass",
                                             "SGLang's --mem-fraction-static from the GPU memory split `validate` "
                                             "prints (empty: SGLang's own)", gt=0, lt=1)
    inference_replica_urls: str | None = _var(
        "HERMES_INFERENCE_REPLICA_URLS", None, "pass",
        "with inference.replicas > 1: each replica's own URL, comma-separated (the router's workers; the trainer "
        "pushes weights to each); empty: one inference service, no router")
    micro_batch_size: int | None = _var("HERMES_MICRO_BATCH_SIZE", None, "pass",
                                        "the torch engine's micro-batch from the GPU memory split, used when "
                                        "trainer.micro_batch_size is null (empty: the whole minibatch)", ge=1)
    inference_key: SecretStr | None = _var(INFERENCE_KEY_ENV, None, "secret",
                                           "the key protecting the inference service (generated by `up` unless the "
                                           "key file sets it); the inference service refuses to start without it")
    # -- tuning knobs: defaults here; a user sets them in the shell that runs `up`. Waits of 1 s to a week: below a
    # second a trainer gives up on its first batch; past ~9.3e9 s a future's wait raises OverflowError (time_t).
    batch_timeout_s: float = _var("HERMES_BATCH_TIMEOUT_S", 600.0, "pass",
                                  "trainer: seconds to wait for one batch before naming the likely cause", ge=1, le=WEEK_S)
    atropos_outage_s: float = _var("HERMES_ATROPOS_OUTAGE_S", 600.0, "pass",
                                   "trainer: seconds to wait for a restarting Atropos before it checkpoints and "
                                   "stops", ge=1, le=WEEK_S)
    inference_wait_s: float = _var("HERMES_INFERENCE_WAIT_S", 120.0, "pass",
                                   "trainer: the least seconds a restarting inference service is waited for (longer "
                                   "when its model took longer to start: twice that, plus 60 s)", ge=1, le=WEEK_S)
    env_departed_s: float = _var("HERMES_ENV_DEPARTED_S", 120.0, "pass",
                                 "trainer: seconds an environment's queued groups may sit while no batch forms "
                                 "before it counts as departed", ge=1, le=WEEK_S)
    tinker_timeout_s: float = _var("HERMES_TINKER_TIMEOUT_S", 900.0, "pass",
                                   "trainer: seconds any wait on a Tinker future may take", ge=1, le=WEEK_S)
    trainer_memory_cap_gib: float | None = _var("HERMES_TRAINER_MEMORY_CAP_GIB", None, "pass",
                                                "trainer dry-run: the memory its measured forward and backward may "
                                                "peak at (empty: the GPU's free memory, or MemAvailable on CPU)",
                                                gt=0)
    logprob_tolerance: float = _var("HERMES_LOGPROB_TOLERANCE", defaults.LOGPROB_TOLERANCE, "pass",
                                    "trainer dry-run: the mean absolute log ratio a token that the log-prob and weight sync "
                                    "checks accept between served and trainer log-probs (below 0.1: the weight sync "
                                    "check's probe moves by at least that)", gt=0, lt=0.1)
    # tests/static/test_compose_files.py checks the bound against compose's healthcheck timeout
    health_timeout_s: float = _var("HERMES_HEALTH_TIMEOUT", defaults.HEALTH_TIMEOUT_S, "pass",
                                   "healthchecks: seconds one probe request may take (at most 12: a held probe's 20 s "
                                   "and one check's two requests fit compose's 50 s timeout)", gt=0, le=12)
    log_level: Annotated[LogLevel, BeforeValidator(_upper)] = _var(
        "HERMES_LOG_LEVEL", "INFO", "pass", "every service: the log level (hermes_stack.service_log)")
    inference_server: Literal["sglang", "builtin"] | None = _var(
        "HERMES_INFERENCE_SERVER", None, "pass", "inference: the backend (empty: inference.server)")
    inference_host: Annotated[str, BeforeValidator(_listen_address)] = _var(
        "HERMES_INFERENCE_HOST", "0.0.0.0", "pass", "inference: the address it listens on")
    inference_device: Annotated[str, BeforeValidator(_torch_device)] = _var(
        "HERMES_INFERENCE_DEVICE", "cpu", "pass", "inference: the torch device of the builtin backend")
    sglang_port: int = _var("HERMES_SGLANG_PORT", 30000, "pass",
                            "inference: SGLang's own port inside the container", ge=1, le=65535)
    sglang_tp: int = _var("HERMES_SGLANG_TP", 1, "pass", "inference: SGLang's tensor-parallel size", ge=1, le=64)

    # ---------------------------------------------------------------- the two directions

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ServiceEnv:
        """The settings in `environ` (os.environ by default). An empty value is unset (compose's `${X:-}`); a bad one
        is an InputError naming "(environment)", the variable, what it found and what it expects."""
        environ = os.environ if environ is None else environ
        given = {alias: environ[alias] for alias in aliases() if environ.get(alias, "").strip()}
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            raise InputError([_problem(err) for err in exc.errors(include_url=False)]) from None

    @classmethod
    def for_stack(cls, stack: StackConfig | None, inference_key: str, unlock: bool,
                  environ: Mapping[str, str] | None = None) -> ServiceEnv:
        """What `up` gives the services for `stack`: the tuning knobs from the controller's environment (the user's
        shell; checked here, before anything starts), the rest from the validated configuration."""
        environ = os.environ if environ is None else environ
        knobs = cls.from_environ({alias: environ[alias] for alias in knob_aliases() if alias in environ})
        derived: dict[str, Any] = dict.fromkeys(SET_BY_UP) | {"unlock": unlock,
                                                             "inference_key": SecretStr(inference_key)}
        if stack is not None:
            split = stack.gpu_split
            derived.update(
                model=stack.model,
                # One name for the inference service, its healthcheck and the trainer's dry-run.
                served_model_name=stack.settings.inference.model_path,
                inference_port=stack.settings.inference.port,
                inference_replica_urls=",".join(replica_urls(getattr(stack.settings.inference, "replicas", 1),
                                                             stack.settings.inference.port)) or None,
                sglang_mem_fraction=split.mem_fraction_static or None if split else None,
                micro_batch_size=split.micro_batch if split and split.micro_batch >= 1 else None)
        return knobs.model_copy(update=derived)

    def to_compose_env(self) -> dict[str, str]:
        """The strings compose's process environment gets: every "pass" field (compose interpolates them into
        `x-env`) and every "secret" field (the source of its Compose secret). "" stands for unset."""
        out = {}
        for name, info in type(self).model_fields.items():
            if _kind(info) in ("pass", "secret"):
                value = getattr(self, name)
                out[info.alias] = compose_text(value.get_secret_value() if isinstance(value, SecretStr) else value)
        return out

    @property
    def replica_urls(self) -> tuple[str, ...]:
        """The replicas' own URLs (empty: one inference service)."""
        return tuple(u.strip() for u in (self.inference_replica_urls or "").split(",") if u.strip())

    @property
    def key(self) -> str | None:
        """The inference key in clear (None when unset)."""
        return self.inference_key.get_secret_value() if self.inference_key else None


def replica_service(i: int) -> str:
    """Replica i's compose service (1-based): the first keeps the name `inference`, the others `inference-<i>`."""
    return "inference" if i == 1 else f"inference-{i}"


def replica_urls(replicas: int, port: int) -> list[str]:
    """Each replica's URL on the compose network; none for one replica (no router: `inference` is the server)."""
    if replicas <= 1:
        return []
    return [f"http://{replica_service(i)}:{port}" for i in range(1, replicas + 1)]


def compose_text(value: Any) -> str:
    """A value as compose's environment writes it: "" for unset, 0/1 for booleans, 600 rather than 600.0."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _kind(info: Any) -> str:
    return (info.json_schema_extra or {}).get("compose", "")


# The fields `up` derives from the validated configuration (for_stack); the other "pass" fields are the user's knobs.
SET_BY_UP = ("unlock", "model", "served_model_name", "inference_port", "inference_replica_urls",
             "sglang_mem_fraction", "micro_batch_size", "inference_key")
_WHO = {"fixed": "compose (`x-env`)", "algo": "compose.<algo>.yml (`x-algo`)", "secret": "`up` (Compose secret)"}


def markdown_table() -> str:
    """docs/architecture.md's table of the service environment, generated from the model (the doc's copy is checked
    against it: tests/static/test_service_env_contract.py)."""
    rows = ["| variable | meaning | who sets it |", "|---|---|---|"]
    for name, info in ServiceEnv.model_fields.items():
        default = compose_text(info.default.get_secret_value() if isinstance(info.default, SecretStr) else info.default)
        knob = _kind(info) == "pass" and name not in SET_BY_UP
        meaning = info.description + (f" (default `{default}`)" if default and knob else "")
        who = _WHO.get(_kind(info)) or ("`up`" if name in SET_BY_UP else "the user's shell (knob)")
        rows.append(f"| `{info.alias}` | {meaning} | {who} |")
    return "\n".join(rows)


def knob_aliases() -> list[str]:
    """The user's tuning knobs: the "pass" variables `up` does not derive from the configuration (a derived one set
    in the shell is replaced by for_stack, so it is not checked as if it counted)."""
    return [info.alias for name, info in ServiceEnv.model_fields.items()
            if _kind(info) == "pass" and name not in SET_BY_UP]


def set_by_up_aliases() -> dict[str, str]:
    """field name -> variable, for the variables `up` derives from the configuration."""
    return {name: ServiceEnv.model_fields[name].alias for name in SET_BY_UP}


def aliases(*kinds: str) -> list[str]:
    """The variables of ServiceEnv (of the given compose kinds; all without any)."""
    return [info.alias for info in ServiceEnv.model_fields.values() if not kinds or _kind(info) in kinds]


def _problem(err: Any) -> Problem:
    alias = str(err["loc"][0]) if err["loc"] else "(environment)"
    found = err.get("input")
    expected = err["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
    if err["type"] in ("int_parsing", "float_parsing"):
        expected = "an integer" if err["type"] == "int_parsing" else "a number"
    info = next((i for i in ServiceEnv.model_fields.values() if i.alias == alias), None)
    hint = info.description if info is not None else ""
    return Problem("(environment)", alias, repr(found), expected, hint)


def load_service_stack(env: ServiceEnv) -> StackConfig:
    """The StackConfig a service runs with, from its environment: the same files, profile, --model and --unlock as
    the controller's (HERMES_CONFIG_DIR, HERMES_ALGO, HERMES_PROFILE, HERMES_MODEL, HERMES_UNLOCK), so a service
    accepts exactly what `up` accepted. Every service loads its configuration here."""
    from hermes_stack.config.loader import load_stack

    return load_stack(env.algo, env.config_dir, env.profile, unlock=env.unlock, model=env.model)


def compose_environment(values: Mapping[str, str], service: ServiceEnv) -> dict[str, str]:
    """The variables compose's process needs: every key-file name of RECEIVERS (empty when the key file lacks it:
    compose then creates no secret file, and a plain `docker compose up` without them stops at once), plus the
    service environment's own (`to_compose_env`: the inference key, HERMES_UNLOCK, the pass-throughs).

    `values` are the key file's own lines (a defaulted TINKER_API_KEY is a validation construct, not a line)."""
    env = {name: values.get(name) or "" for name in RECEIVERS}
    return env | service.to_compose_env()

