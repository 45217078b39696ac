"""hermes-stack: PPO and GRPO training on Atropos as one validated Docker Compose stack."""

__version__ = "0.1.0"
