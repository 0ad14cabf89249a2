"""`run` and `demo`: the relay itself, and the local demo around it."""

from __future__ import annotations

import argparse

from outbox_relay.stream.budget import budget_seconds


def run_argv(args: argparse.Namespace) -> list[str]:
    """The command line of outbox_relay.app.main for `outbox-relay run ...`."""
    argv = ["--config", args.config] if args.config else []
    if args.available_now:
        argv.append("--available-now")
    if args.time_budget_s is not None:
        argv += ["--time-budget-s", repr(args.time_budget_s)]
    return [*argv, "--log-level", args.log_level, "--log-format", args.log_format]


def _run(args: argparse.Namespace) -> int:
    # Imported here: outbox_relay.app's run loads Spark, which no other command needs.
    from outbox_relay.app import main as run_main

    return run_main(run_argv(args))


def _demo(args: argparse.Namespace) -> int:
    from outbox_relay.demo import run_demo

    return run_demo(args.config or "conf/local.toml", args.messages)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="run the relay (same as jobs/relay.py)")
    # The relay's own options, named here: a REMAINDER argument took no option as its
    # first word, so `outbox-relay run --available-now` was refused.
    run.add_argument("--available-now", action="store_true", help="drain what exists, then exit")
    run.add_argument("--time-budget-s", type=budget_seconds, metavar="S",
                     help="with --available-now: claim nothing after S seconds, exit 1 if "
                     "rows are left; default: relay.available_now_budget_s")
    run.set_defaults(fn=_run)
    demo = sub.add_parser("demo", help="local stack, demo outbox, drain, summary")
    demo.add_argument("--messages", type=int, default=3000)
    demo.set_defaults(fn=_demo)
