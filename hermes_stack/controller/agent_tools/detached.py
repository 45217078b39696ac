"""`python -m hermes_stack.controller.agent_tools.detached <run dir> -- <hermes-stack arguments>`: the controller command an
agent tool started in the background (rl_start_training's `up`), with its exit code written to <run dir>/exit_code
when it returns, so a later MCP server (or a restarted one) knows how it ended."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    run_dir, args = Path(argv[0]), argv[argv.index("--") + 1:]
    from hermes_stack.controller.cli import main as cli_main

    code = 1
    try:
        code = cli_main(args)
    finally:
        tmp = run_dir / "exit_code.tmp"
        tmp.write_text(f"{code}\n")
        tmp.replace(run_dir / "exit_code")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
