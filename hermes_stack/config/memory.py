"""The GPU memory model: model shapes and the split of one GPU between SGLang and the torch trainer (split_for).
Pure functions; reading a model's config.json at the edge. The GPU's size comes from the controller's probe
(hermes_stack.controller.device.detect_gpu_memory_gib).

KV cache bytes = 2 (K and V) x layers x kv_heads x head_dim x bytes(dtype) x tokens x sequences.
Weights = embeddings + per layer (attention q/k/v/o [+ qkv bias] + gated MLP + 2 norms) + final norm + lm_head
(absent when tie_word_embeddings). LoRA = rank x (in + out) for each of q, k, v, o, gate, up, down in every layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_stack.errors import Problem

if TYPE_CHECKING:
    from hermes_stack.config.models import AlgoConfig, RolloutSection, Settings

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "float8": 1, "int8": 1}


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    dtype_bytes: int = 2

    @classmethod
    def from_config(cls, cfg: dict) -> ModelShape:
        """From a Hugging Face config.json (Llama/Qwen/Mistral style)."""
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").removeprefix("torch.")
        return cls(
            hidden_size=hidden,
            num_layers=int(cfg["num_hidden_layers"]),
            num_attention_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            # Qwen2 puts a bias on q/k/v without saying so in config.json.
            attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
            dtype_bytes=DTYPE_BYTES.get(dtype, 2),
        )


# Shapes of well-known hub models, written from their published config.json, for when the model is not on disk.
KNOWN_SHAPES: dict[str, ModelShape] = {
    "meta-llama/meta-llama-3-8b": ModelShape(4096, 32, 32, 8, 128, 14336, 128256),
    "meta-llama/llama-3.1-8b": ModelShape(4096, 32, 32, 8, 128, 14336, 128256),
    "qwen/qwen3-8b": ModelShape(4096, 36, 32, 8, 128, 12288, 151936),
    "qwen/qwen3-4b": ModelShape(2560, 36, 32, 8, 128, 9728, 151936, tie_word_embeddings=True),
    "qwen/qwen2.5-1.5b": ModelShape(1536, 28, 12, 2, 128, 8960, 151936, tie_word_embeddings=True,
                                    attention_bias=True),
    "qwen/qwen2.5-7b": ModelShape(3584, 28, 28, 4, 128, 18944, 152064, attention_bias=True),
}
for _name in list(KNOWN_SHAPES):
    KNOWN_SHAPES[_name + "-instruct"] = KNOWN_SHAPES[_name]


def param_count(s: ModelShape) -> int:
    q = s.num_attention_heads * s.head_dim
    kv = s.num_kv_heads * s.head_dim
    attention = s.hidden_size * q + 2 * s.hidden_size * kv + q * s.hidden_size
    if s.attention_bias:
        attention += q + 2 * kv
    mlp = 3 * s.hidden_size * s.intermediate_size
    per_layer = attention + mlp + 2 * s.hidden_size
    embeddings = s.vocab_size * s.hidden_size
    lm_head = 0 if s.tie_word_embeddings else embeddings
    return embeddings + s.num_layers * per_layer + s.hidden_size + lm_head


def lora_param_count(s: ModelShape, rank: int) -> int:
    q = s.num_attention_heads * s.head_dim
    kv = s.num_kv_heads * s.head_dim
    h, i = s.hidden_size, s.intermediate_size
    per_layer = rank * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))
    return s.num_layers * per_layer


def kv_bytes_per_token(s: ModelShape) -> int:
    return 2 * s.num_layers * s.num_kv_heads * s.head_dim * s.dtype_bytes


def _gib(n: int) -> str:
    return f"{n / GIB:.1f}".removesuffix(".0")


# ---------------------------------------------------------------- I/O edges


# config.json fields the shape needs, each a positive integer (head_dim and num_key_value_heads are optional).
SHAPE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
OPTIONAL_SHAPE_FIELDS = ("num_key_value_heads", "head_dim")


def read_model_config(path: Path) -> tuple[ModelShape | None, list[Problem]]:
    """A model folder's config.json -> its shape, or the problems naming the file and the field (exit 2, not a
    KeyError or ZeroDivisionError later)."""
    def problem(key: str, found: str, expected: str, hint: str = "") -> list[Problem]:
        return [Problem(str(path), key, found, expected,
                        hint or "the model folder's config.json comes with the weights; copy it again")]

    if not path.is_file():
        return None, problem("(file)", "no such file", "the model's config.json")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, problem("(file)", f"a file that is not JSON ({type(exc).__name__})", "a Hugging Face config.json")
    if not isinstance(cfg, dict):
        return None, problem("(top level)", f"a JSON {type(cfg).__name__}", "a JSON object")
    problems: list[Problem] = []
    for name in SHAPE_FIELDS + OPTIONAL_SHAPE_FIELDS:
        value = cfg.get(name)
        if value is None and name in OPTIONAL_SHAPE_FIELDS:
            continue
        if value is None:
            problems += problem(name, "nothing", "a positive integer")
        elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            problems += problem(name, json.dumps(value), "a positive integer")
    if problems:
        return None, problems
    return ModelShape.from_config(cfg), []


def find_shape(model_path: str, base_dir: Path | None = None) -> ModelShape | None:
    """config.json of a local model directory, else the built-in table by hub name; None when unknown or unreadable
    (rules.model_path_local reports an unreadable one)."""
    try:
        candidates = [Path(model_path).expanduser()]
    except RuntimeError:  # ~user naming no user here: a path as written (rules.model_path_local says it is missing)
        candidates = [Path(model_path)]
    if base_dir is not None and not candidates[0].is_absolute():
        candidates.append(base_dir / model_path)
    from hermes_stack.textfile import path_unusable

    for directory in candidates:
        config = directory / "config.json"
        if path_unusable(config) is None and config.is_file():  # a name over 255 bytes raises in is_file()
            return read_model_config(config)[0]
    known = KNOWN_SHAPES.get(model_path.lower())
    if known is not None:
        return known
    cached = _cached_hub_config(model_path, base_dir)
    return read_model_config(cached)[0] if cached else None


def _cached_hub_config(model_path: str, base_dir: Path | None) -> Path | None:
    """config.json of a hub id from this machine's Hugging Face cache, without any network call (e.g. after
    `huggingface-cli download <id> config.json`); None when it is not there."""
    from hermes_stack.hub import is_hub_id

    if not is_hub_id(model_path, base_dir):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(model_path, "config.json")
    except (ValueError, OSError):  # a name the hub library refuses (HFValidationError), an unreadable cache: no shape
        return None
    return Path(found) if isinstance(found, str) else None


# ---------------------------------------------------------------- one GPU shared by SGLang and the torch trainer
#
# SGLang pre-allocates `--mem-fraction-static` of the GPU for its weights and KV cache, and needs more outside that
# for its activations and CUDA graphs. Its default fraction leaves only ~10 GiB, less than an 8B model's bf16 weights,
# so the trainer's model load then hits CUDA OOM. The split below gives the trainer what it needs first:
#   trainer  = weights (bf16, frozen base) + LoRA adapter with its gradients and two AdamW moments (float32)
#              + the chunked log-softmax's working set + one micro-batch's activations
#   SGLang   = weights + KV cache (at least one group: group_size x max_token_length)   <- the static fraction
#   reserve  = SGLang's runtime outside the static pool + the trainer's CUDA context and allocator slack
# The KV cache does not have to hold the whole batch: SGLang queues requests that do not fit (throughput, not OOM).
#
# Activations are what the GPU torch engine (trainer/engine_torch.py) really keeps, per sequence, counted at
# max_token_length: every row of a micro-batch is padded to its longest row, and one rollout can reach the limit, so
# the worst micro-batch is micro_batch_size rows of max_token_length. The engine uses gradient checkpointing there:
#   kept through the forward pass: each decoder layer's input (hidden, bf16) and the logits (bf16), plus the flat
#     copy of them the chunked log-softmax keeps as its checkpoint input (trainer/algorithms.py)
#   during backward, for ONE layer at a time: that layer's recomputed tensors (~10 hidden- and 4 intermediate-sized,
#     bf16), the float32 copy of its input every peft LoRA module keeps (peft upcasts adapters to float32 by default
#     and casts the input to the adapter's dtype: q, k, v, gate, up read the hidden state, o the attention output,
#     down the MLP's), the attention probabilities when SDPA falls back to its math kernel under a padding mask
#     (heads x width per token), and the logits' gradient (bf16, and its un-flattened copy)
# Without checkpointing every layer keeps the second list (about 4x more for Qwen3-8B at 2048 tokens); the plan is
# for the GPU engine, which never runs without it. docs/memory.md states this model; bench/gpu_smoke.py and the
# dry-run's measured check compare it with the real peak.

SGLANG_RUNTIME_BYTES = 4 * GIB  # activations, CUDA graphs, sampler buffers outside the static pool
TRAINER_RUNTIME_BYTES = 2 * GIB  # CUDA context, cuBLAS workspace, allocator fragmentation
FLOAT32_BYTES = 4
ACT_HIDDEN_TENSORS = 10  # per token, in one recomputed decoder layer
ACT_INTERMEDIATE_TENSORS = 4
LOGIT_KEPT_COPIES = 2  # the logits and the flat copy the chunked log-softmax keeps as its checkpoint input
LOGIT_GRAD_COPIES = 2  # the logits' gradient, flat and un-flattened, during backward
LOGPROB_CHUNK_BYTES = 1 << 30  # the engine's float32 log-softmax over the vocabulary, per chunk of positions
LOGPROB_WORKING_BYTES = 3 * LOGPROB_CHUNK_BYTES  # one chunk's float32 upcast, log-softmax, exp and their gradients
MAX_MICRO_BATCH = 16  # beyond this, larger micro-batches buy little speed and cost the KV cache a lot


def lora_input_features(s: ModelShape) -> int:
    """Per token and layer, the input features of the seven LoRA modules (each keeps its own float32 copy)."""
    q = s.num_attention_heads * s.head_dim
    return 3 * s.hidden_size + q + 2 * s.hidden_size + s.intermediate_size  # q k v | o | gate up | down


def activation_kept_bytes_per_token(s: ModelShape) -> int:
    """What gradient checkpointing keeps from the forward pass until backward, per token of a sequence."""
    return s.num_layers * s.hidden_size * s.dtype_bytes + LOGIT_KEPT_COPIES * s.vocab_size * s.dtype_bytes


def activation_recompute_bytes_per_token(s: ModelShape, width: int) -> int:
    """What backward adds for the one layer being recomputed, per token of a `width`-token padded row."""
    layer = s.dtype_bytes * (ACT_HIDDEN_TENSORS * s.hidden_size + ACT_INTERMEDIATE_TENSORS * s.intermediate_size)
    lora_inputs = FLOAT32_BYTES * lora_input_features(s)
    attention_probs = s.num_attention_heads * width * s.dtype_bytes
    logit_grads = LOGIT_GRAD_COPIES * s.vocab_size * s.dtype_bytes
    return layer + lora_inputs + attention_probs + logit_grads


def activation_bytes_per_sequence(s: ModelShape, tokens: int) -> int:
    """Peak activation bytes one row of `tokens` (padded width) adds to a micro-batch (module comment above)."""
    return tokens * (activation_kept_bytes_per_token(s) + activation_recompute_bytes_per_token(s, tokens))


def trainer_fixed_bytes(s: ModelShape, lora_rank: int) -> int:
    """Frozen base weights (base dtype) + the LoRA adapter, its gradients and AdamW's two moments (float32: peft
    upcasts adapter weights) + the chunked log-softmax's working set."""
    return (param_count(s) * s.dtype_bytes + 4 * lora_param_count(s, lora_rank) * FLOAT32_BYTES
            + LOGPROB_WORKING_BYTES)


@dataclass(frozen=True)
class GpuSplit:
    gpu_bytes: int
    sequences: int  # per training step (batch_size x group_size)
    group_size: int
    tokens: int
    weights_bytes: int  # one copy
    trainer_fixed_bytes: int
    activation_bytes: int  # per sequence
    kv_bytes_per_sequence: int
    micro_batch: int  # 0: not even one sequence fits
    kv_pool_bytes: int
    activation_kept_bytes: int = 0  # of activation_bytes: what checkpointing keeps through the forward pass

    @property
    def reserve_bytes(self) -> int:
        return SGLANG_RUNTIME_BYTES + TRAINER_RUNTIME_BYTES

    @property
    def trainer_bytes(self) -> int:
        return self.trainer_fixed_bytes + self.micro_batch * self.activation_bytes

    @property
    def sglang_static_bytes(self) -> int:
        return self.weights_bytes + self.kv_pool_bytes

    @property
    def mem_fraction_static(self) -> float:
        """SGLang's --mem-fraction-static, rounded down to 0.01 (never more than planned)."""
        return int(self.sglang_static_bytes * 100 // self.gpu_bytes) / 100 if self.gpu_bytes else 0.0

    @property
    def concurrent_sequences(self) -> int:
        held = self.kv_pool_bytes // self.kv_bytes_per_sequence if self.kv_bytes_per_sequence else 0
        return min(held, self.sequences)

    def lines(self) -> list[str]:
        g = _gib
        sglang = (f"  SGLang --mem-fraction-static {self.mem_fraction_static:.2f} = {g(self.sglang_static_bytes)} GiB: "
                  f"weights {g(self.weights_bytes)} + KV cache {g(self.kv_pool_bytes)} GiB (~{self.concurrent_sequences} "
                  f"of the {self.sequences} sequences x {self.tokens} tokens of a step at once; the rest queue)")
        lora = self.trainer_fixed_bytes - self.weights_bytes - LOGPROB_WORKING_BYTES
        fixed = (f"  trainer {g(self.trainer_bytes)} GiB: weights {g(self.weights_bytes)} + LoRA with gradients and "
                 f"AdamW {g(lora)} + log-softmax chunk {g(LOGPROB_WORKING_BYTES)} + ")
        kept = (f"gradient checkpointing keeps {g(self.activation_kept_bytes)} GiB of layer inputs and logits, backward "
                f"recomputes one layer with its float32 LoRA inputs in "
                f"{g(self.activation_bytes - self.activation_kept_bytes)} GiB")
        if self.micro_batch:
            trainer = (f"{fixed}micro_batch_size {self.micro_batch} x {g(self.activation_bytes)} GiB activations "
                       f"({self.tokens} tokens each, every row padded to the longest; {kept}; "
                       f"{-(-self.sequences // self.micro_batch)} micro-batches a step, gradients accumulated)")
        else:  # not one sequence fits: the refusal below names the fix; a "micro_batch_size 0" line only confused
            trainer = (f"{fixed}no room for one sequence's {g(self.activation_bytes)} GiB of activations "
                       f"({self.tokens} tokens; {kept})")
        reserve = (f"  reserve {g(self.reserve_bytes)} GiB: SGLang's runtime outside its static pool, the trainer's "
                   "CUDA context and allocator slack")
        return [f"GPU memory split ({g(self.gpu_bytes)} GiB, one GPU shared by SGLang and the trainer):", sglang,
                trainer, reserve]


def plan_split(shape: ModelShape, rollout: RolloutSection, *, lora_rank: int, gpu_gib: float,
               micro_batch: int | None = None) -> GpuSplit:
    """The split for this model and [rollout] section on one GPU. `micro_batch` None: the largest that fits while the
    KV cache keeps at least half of what is left (capped at MAX_MICRO_BATCH and the step's sequences); given: exactly
    it."""
    gpu = int(gpu_gib * GIB)
    sequences, group_size, tokens = rollout.sequences_per_step, rollout.group_size, rollout.max_token_length
    weights = param_count(shape) * shape.dtype_bytes
    fixed = trainer_fixed_bytes(shape, lora_rank)
    act = activation_bytes_per_sequence(shape, tokens)
    kv_seq = kv_bytes_per_token(shape) * tokens
    free = gpu - SGLANG_RUNTIME_BYTES - TRAINER_RUNTIME_BYTES - weights - fixed  # for KV and activations
    if micro_batch is None:
        micro_batch = max(0, min(free // 2 // act if act else 0, MAX_MICRO_BATCH, sequences))
        if micro_batch == 0 and free - act >= kv_seq * group_size:
            micro_batch = 1  # half is not enough, but one sequence still fits next to one group's KV cache
    return GpuSplit(gpu_bytes=gpu, sequences=sequences, group_size=group_size, tokens=tokens, weights_bytes=weights,
                    trainer_fixed_bytes=fixed, activation_bytes=act, kv_bytes_per_sequence=kv_seq,
                    micro_batch=micro_batch, kv_pool_bytes=max(free - micro_batch * act, 0),
                    activation_kept_bytes=tokens * activation_kept_bytes_per_token(shape))


def split_for(config: AlgoConfig, settings: Settings, gpu_gib: float | None,
              base_dir: Path | None = None) -> GpuSplit | None:
    """The split of one configuration: the only place it is computed (the memory rule checks it, StackConfig.gpu_split
    keeps it for `validate`'s printout and for `up`). None without a GPU size or for a model whose shape is unknown.
    trainer.micro_batch_size, when set, is used as is; null: the split derives it."""
    if gpu_gib is None:
        return None
    shape = find_shape(settings.inference.model_path, base_dir)
    if shape is None:
        return None
    return plan_split(shape, config.rollout, lora_rank=settings.tinker.lora_rank, gpu_gib=gpu_gib,
                      micro_batch=settings.trainer.micro_batch_size)


def split_refusal(s: GpuSplit, configured_micro_batch: int | None = None) -> tuple[str, str] | None:
    """(key, one line) when the split cannot work; None when it fits. The key names what to change."""
    g = _gib
    head = f"this GPU has {g(s.gpu_bytes)} GiB"
    both = s.weights_bytes + s.trainer_fixed_bytes + s.reserve_bytes
    if both >= s.gpu_bytes:
        line = (f"the model twice (SGLang's copy {g(s.weights_bytes)} GiB, the trainer's with its LoRA state "
                f"{g(s.trainer_fixed_bytes)} GiB) plus {g(s.reserve_bytes)} GiB reserve needs ~{g(both)} GiB; "
                f"{head}: use a smaller model, a bigger GPU, or the Tinker engine")
        return "inference.model_path", line
    group_kv = s.kv_bytes_per_sequence * s.group_size
    if s.micro_batch < 1 or s.kv_pool_bytes < group_kv:
        what = (f"micro_batch_size {configured_micro_batch}" if configured_micro_batch
                else "micro_batch_size 1")
        fits = _largest_micro_batch(s)
        hint = f"try micro_batch_size {fits}" if configured_micro_batch and fits >= 1 else \
            "lower max_token_length or group_size, or use a bigger GPU"
        line = (f"{what} x {s.tokens} tokens needs ~{g(max(s.micro_batch, 1) * s.activation_bytes)} GiB of "
                f"activations and one group's KV cache (group_size {s.group_size} x {s.tokens} tokens) "
                f"~{g(group_kv)} GiB, next to {g(both)} GiB of weights, LoRA state and reserve; {head}; {hint}")
        return ("trainer.micro_batch_size" if configured_micro_batch else "rollout.max_token_length"), line
    return None


def _largest_micro_batch(s: GpuSplit) -> int:
    # From the card, not from kv_pool_bytes: that is clipped at 0 when the micro-batch asked for overflows.
    free = s.gpu_bytes - s.reserve_bytes - s.weights_bytes - s.trainer_fixed_bytes
    room = free - s.kv_bytes_per_sequence * s.group_size
    return max(room // s.activation_bytes, 0) if s.activation_bytes else 0
