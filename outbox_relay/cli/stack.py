"""`stack up|down|env`: the local PostgreSQL + Kafka stack from the command line."""

from __future__ import annotations

import argparse
import sys

from outbox_relay import stack
from outbox_relay.errors import exit_code_of
from outbox_relay.exit_codes import ExitCode


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "stack",
        help="run the local PostgreSQL and Kafka stack",
        description="Start, stop or locate the local PostgreSQL + Kafka stack.",
    )
    commands = parser.add_subparsers(dest="stack_command", metavar="{up,down,env}")
    commands.required = True
    commands.add_parser("up", help="start the stack (if needed) and print its export lines")
    commands.add_parser("down", help="stop the services the stack started")
    commands.add_parser("env", help="print the export lines of the running stack")
    parser.set_defaults(fn=_stack)


def _stack(args: argparse.Namespace) -> int:
    try:
        if args.stack_command == "up":
            if stack.status() is None:
                # stdout stays clean for `eval "$(... stack up)"`.
                print(
                    "starting the local stack (the first run downloads Kafka)...", file=sys.stderr
                )
            _print_env(stack.up())
        elif args.stack_command == "down":
            stack.down()
        elif args.stack_command == "env":
            info = stack.status()
            if info is None:
                print("error: the local stack is not up (run `stack up`)", file=sys.stderr)
                return ExitCode.NOT_FOUND
            _print_env(info)
        else:
            print(f"error: unknown stack command {args.stack_command!r}", file=sys.stderr)
            return ExitCode.USAGE
    except stack.StackError as exc:
        return exit_code_of(exc, prefix="error")
    return ExitCode.OK


def _print_env(info: stack.StackInfo) -> None:
    for line in info.env_lines():
        print(line)
