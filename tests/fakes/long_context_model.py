"""Copy a model folder with a longer context: `max_position_embeddings` in config.json and `model_max_length` in
tokenizer_config.json raised (tests/docker/test_stack_gpu_rehearsal.py: the embedded tiny model, 64 positions, as a
hub model that allows max_token_length 512). Llama's rotary positions are computed, not learnt, so positions past the
trained ones run; what they say is noise, which a rehearsal of the long-sequence mechanics does not mind.

    python long_context_model.py SOURCE DEST POSITIONS
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def long_context_copy(source: Path, dest: Path, positions: int) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest)
    for name, key in (("config.json", "max_position_embeddings"), ("tokenizer_config.json", "model_max_length")):
        path = dest / name
        if path.is_file():
            data = json.loads(path.read_text())
            data[key] = positions
            path.write_text(json.dumps(data, indent=2))
    return dest


if __name__ == "__main__":
    src, dst, n = sys.argv[1:4]
    print(f"long-context copy: {long_context_copy(Path(src), Path(dst), int(n))} ({n} positions)", flush=True)
