"""The `outbox-relay` console script: one sub-command per operator task."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from relay.config import Config
from relay.config_load import load_config
from relay.errors import exit_code_of
from relay.exit_codes import ExitCode
from relay.stack.proc import StackError


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config)


def _cmd_migrate(args: argparse.Namespace) -> int:
    from relay.control.db import Database
    from relay.control.migrate import migrate

    db = Database(_config(args).postgres, "outbox-relay-migrate")
    try:
        applied = migrate(db)
    finally:
        db.close()
    print(f"applied: {', '.join(applied)}" if applied else "schema is up to date")
    return ExitCode.OK


def _cmd_packages(args: argparse.Namespace) -> int:
    from relay.packages import spark_packages_conf

    print(spark_packages_conf())
    return ExitCode.OK


def _cmd_jars(args: argparse.Namespace) -> int:
    from relay.spark_jars import cached_jars, install_spark_defaults

    if args.install:
        print(f"spark.jars written to {install_spark_defaults()}")
    else:
        print(",".join(str(j) for j in cached_jars()))
    return ExitCode.OK


def _cmd_ledger(args: argparse.Namespace) -> int:
    if args.ledger_cmd == "show":
        return _ledger_show(args)
    from relay.control.db import Database
    from relay.ledger.delta import Ledger
    from relay.spark import build_session

    config = _config(args)
    ledger = Ledger(build_session(config), config, Database(config.postgres, "outbox-relay-cli"))
    if args.ledger_cmd == "flush":
        print(f"copied {ledger.flush()} batch(es) to {config.ledger.path}")
        return ExitCode.OK
    ledger.maintain(config.ledger.retention_hours)
    print("ledger optimized and vacuumed")
    return ExitCode.OK


def _ledger_show(args: argparse.Namespace) -> int:
    """Spark-free: deltalake reads the Delta table, so no JVM starts (relay.ledger.lookup)."""
    from relay.control.db import Database
    from relay.control.migrate import require_current
    from relay.ledger.lookup import lookup
    from relay.ledger.show import describe, not_found

    config = _config(args)
    db = Database(config.postgres, "outbox-relay-cli")
    try:
        require_current(db)
        records = lookup(db, config.ledger.path, args.id, args.topic)
    finally:
        db.close()
    if not records:
        print(not_found(args.id, args.topic))
        return ExitCode.NOT_FOUND
    for record in records:
        print(describe(record))
    return ExitCode.OK


def run_argv(args: argparse.Namespace) -> list[str]:
    """The command line of relay.app.main for `outbox-relay [--config C] run ...`."""
    argv = ["--config", args.config] if args.config else []
    if args.available_now:
        argv.append("--available-now")
    if args.log_level:
        argv += ["--log-level", args.log_level]
    if getattr(args, "log_format", None):
        argv += ["--log-format", args.log_format]
    return argv


def _cmd_run(args: argparse.Namespace) -> int:
    from relay.app import main as run_main

    return run_main(run_argv(args))


def _cmd_demo(args: argparse.Namespace) -> int:
    from relay.demo import run_demo

    return run_demo(args.config or "conf/local.toml", args.messages)


def build_parser() -> argparse.ArgumentParser:
    from relay.cli import observe, ops, stack

    p = argparse.ArgumentParser(prog="outbox-relay")
    p.add_argument(
        "--config",
        default=os.environ.get("RELAY_CONFIG"),
        help="TOML profile (default: RELAY_CONFIG, else built-in defaults)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    stack.register(sub)
    sub.choices["stack"].set_defaults(fn=stack.run)
    sub.add_parser("migrate", help="apply the schema (idempotent)").set_defaults(fn=_cmd_migrate)
    sub.add_parser("packages", help="print the Spark packages").set_defaults(fn=_cmd_packages)
    jars = sub.add_parser(
        "jars", help="print the cached jars of the Spark packages (for --jars), resolving once"
    )
    jars.add_argument(
        "--install", action="store_true", help="write them into Spark's spark-defaults.conf"
    )
    jars.set_defaults(fn=_cmd_jars)
    ops.register(sub)
    observe.register(sub)
    run = sub.add_parser("run", help="run the relay (same as jobs/relay.py)")
    # The relay's own options, named here: a REMAINDER argument took no option as its
    # first word, so `outbox-relay run --available-now` was refused.
    run.add_argument("--available-now", action="store_true", help="drain what exists, then exit")
    run.add_argument("--log-level", help="default: RELAY_LOG_LEVEL, else INFO")
    run.add_argument("--log-format", choices=("text", "json"),
                     help="json: one object per line; default: RELAY_LOG_FORMAT, else text")
    run.set_defaults(fn=_cmd_run)
    demo = sub.add_parser("demo", help="local stack, demo outbox, drain, summary")
    demo.add_argument("--messages", type=int, default=3000)
    demo.set_defaults(fn=_cmd_demo)
    ledger = sub.add_parser("ledger", help="the Delta ledger")
    lsub = ledger.add_subparsers(dest="ledger_cmd", required=True)
    show = lsub.add_parser("show", help="was message ID relayed? when, where (no Spark)")
    show.add_argument("--topic", help="only this topic's record (default: every topic's)")
    show.add_argument("--id", type=int, required=True)
    lsub.add_parser("flush", help="copy staged records to Delta now")
    lsub.add_parser("maintain", help="OPTIMIZE and VACUUM the ledger")
    ledger.set_defaults(fn=_cmd_ledger)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.fn(args)
        return code
    except StackError as exc:
        print(f"outbox-relay: {exc}", file=sys.stderr)
        return ExitCode.STACK_FAILED
    except Exception as exc:
        return exit_code_of(exc)
