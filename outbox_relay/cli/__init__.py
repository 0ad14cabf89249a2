"""The `outbox-relay` console script: one sub-command per operator task.

Each module of this package registers its own sub-commands the same way: `register(sub)`
adds them to the parser and binds each to its handler (`fn`), which returns the exit code.
Every parser takes the global options, before or after the sub-command (outbox_relay.options).
The modules are imported once the [relay] extra is known to be there: they import its
database and Kafka clients, which the base install (the publisher alone) does not have.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from outbox_relay.cli.run import run_argv
from outbox_relay.errors import ConfigError, exit_code_of
from outbox_relay.launch.extras import require_relay_extra
from outbox_relay.observe.logs import configure_logging
from outbox_relay.options import CommandParser, add_global_options

__all__ = ["build_parser", "main", "run_argv"]


def build_parser() -> argparse.ArgumentParser:
    from outbox_relay.cli import ledger, observe, ops, prepare, run, stack

    p = argparse.ArgumentParser(prog="outbox-relay")
    add_global_options(p)
    sub = p.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    # In the order `outbox-relay --help` lists their commands.
    for module in (stack, prepare, ops, observe, run, ledger):
        module.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        require_relay_extra()
    except ConfigError as exc:
        return exit_code_of(exc)
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        code: int = args.fn(args)
        return code
    except Exception as exc:
        return exit_code_of(exc)
