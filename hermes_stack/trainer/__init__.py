"""The trainer: pure RL math (algorithms), the engine interface and its torch/Tinker engines, the embedded tiny model,
the Atropos client, checkpoints and metrics. `python -m hermes_stack.trainer` runs it."""
