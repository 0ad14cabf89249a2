"""`ledger show|flush|maintain`: the Delta ledger of relayed and skipped messages."""

from __future__ import annotations

import argparse

from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.extras import require_spark_extra
from outbox_relay.options import one_profile


def _ledger(args: argparse.Namespace) -> int:
    if args.ledger_cmd == "show":
        return _show(args)
    require_spark_extra()  # flush and maintain run Spark; the imports below load it
    from outbox_relay.control.db import Database
    from outbox_relay.launch.spark import build_session
    from outbox_relay.ledger.delta import Ledger

    config = one_profile(args)
    ledger = Ledger(build_session(config), config, Database(config.postgres, "outbox-relay-cli"))
    if args.ledger_cmd == "flush":
        print(f"copied {ledger.flush()} batch(es) to {config.ledger.path}")
        return ExitCode.OK
    ledger.maintain(config.ledger.retention_hours)
    print("ledger optimized and vacuumed")
    return ExitCode.OK


def _show(args: argparse.Namespace) -> int:
    """Spark-free: deltalake reads the Delta table, so no JVM starts
    (outbox_relay.ledger.lookup)."""
    from outbox_relay.control.db import Database
    from outbox_relay.control.migrate import require_current
    from outbox_relay.ledger.lookup import lookup
    from outbox_relay.ledger.show import describe, not_found

    config = one_profile(args)
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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ledger = sub.add_parser("ledger", help="the Delta ledger")
    lsub = ledger.add_subparsers(dest="ledger_cmd", required=True)
    show = lsub.add_parser("show", help="was message ID relayed? when, where (no Spark)")
    show.add_argument("--topic", help="only this topic's record (default: every topic's)")
    show.add_argument("--id", type=int, required=True)
    lsub.add_parser("flush", help="copy staged records to Delta now")
    lsub.add_parser("maintain", help="OPTIMIZE and VACUUM the ledger")
    ledger.set_defaults(fn=_ledger)
