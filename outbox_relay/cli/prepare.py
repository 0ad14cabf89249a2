"""`migrate`, `packages`, `jars`: what a run needs first (the schema, Spark's packages)."""

from __future__ import annotations

import argparse
import os
import sys

from outbox_relay.errors import RelayError, exit_code_for, first_line
from outbox_relay.exit_codes import ExitCode
from outbox_relay.options import profile


def _migrate(args: argparse.Namespace) -> int:
    """Every database of the profile (or the one --database names), each on its own: one
    that fails is reported, and the others are migrated still."""
    from outbox_relay.control.catalog import every_database
    from outbox_relay.control.db import Database
    from outbox_relay.control.migrate import migrate

    code: int = ExitCode.OK
    for name, config in every_database(profile(args), os.environ):
        where = "" if name is None else f"database {name}: "
        try:
            db = Database(config.postgres, "outbox-relay-migrate")
            try:
                applied = migrate(db)
            finally:
                db.close()
        except RelayError as exc:
            if name is None:
                raise
            print(f"{where}not migrated: {first_line(exc)}", file=sys.stderr)
            code = code or exit_code_for(exc)
            continue
        print(where + (f"applied: {', '.join(applied)}" if applied else "schema is up to date"))
    return code


def _packages(args: argparse.Namespace) -> int:
    from outbox_relay.launch.packages import spark_packages_conf

    print(spark_packages_conf())
    return ExitCode.OK


def _jars(args: argparse.Namespace) -> int:
    from outbox_relay.launch.spark_jars import cached_jars, install_spark_defaults

    if args.install:
        print(f"spark.jars written to {install_spark_defaults()}")
    else:
        print(",".join(str(j) for j in cached_jars()))
    return ExitCode.OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("migrate", help="apply the schema (idempotent), to every database "
                   "of the profile unless --database names one").set_defaults(fn=_migrate)
    sub.add_parser("packages", help="print the Spark packages").set_defaults(fn=_packages)
    jars = sub.add_parser(
        "jars", help="print the cached jars of the Spark packages (for --jars), resolving once"
    )
    jars.add_argument(
        "--install", action="store_true", help="write them into Spark's spark-defaults.conf"
    )
    jars.set_defaults(fn=_jars)
