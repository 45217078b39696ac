"""The controller: the host side of hermes-stack (the `hermes-stack` command). It validates the configs, checks the
machine, drives docker compose and reads the stack's state. It imports the contract (the top-level modules), config,
tasks and modelcore, never a service package (tests/static/test_import_boundaries.py)."""
