"""The trainer: pure RL math (algorithms), the engine interface and its torch/Tinker engines, the Atropos client,
checkpoints, metrics and the weight push. The model code it shares with the inference service and the environment
is hermes_stack.modelcore. `python -m hermes_stack.trainer` runs it."""
