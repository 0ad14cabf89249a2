"""The `outbox-relay` console script: one sub-command per operator task.

Each module of this package registers its own sub-commands the same way: `register(sub)`
adds them to the parser and binds each to its handler (`fn`), which returns the exit code.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from outbox_relay.cli import ledger, observe, ops, prepare, run, stack
from outbox_relay.cli.run import run_argv
from outbox_relay.errors import exit_code_of

__all__ = ["build_parser", "main", "run_argv"]

# In the order `outbox-relay --help` lists their commands.
_COMMANDS = (stack, prepare, ops, observe, run, ledger)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="outbox-relay")
    p.add_argument(
        "--config",
        default=os.environ.get("RELAY_CONFIG"),
        help="TOML profile (default: RELAY_CONFIG, else built-in defaults)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for module in _COMMANDS:
        module.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.fn(args)
        return code
    except Exception as exc:
        return exit_code_of(exc)
