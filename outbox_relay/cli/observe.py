"""`outbox-relay status` and `outbox-relay metrics serve`: look, never touch, start no JVM."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from outbox_relay.config import DEFAULT_TOP_TOPICS
from outbox_relay.control.catalog import every_database
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import require_current
from outbox_relay.errors import RelayError, exit_code_for, first_line
from outbox_relay.exit_codes import ExitCode
from outbox_relay.observe.backlog import COUNT_BUDGET, EXACT_UP_TO
from outbox_relay.options import profile

if TYPE_CHECKING:
    from outbox_relay.config import Config
    from outbox_relay.observe.report import Thresholds
    from outbox_relay.observe.status import Snapshot

DEFAULT_METRICS_PORT = 9466


def _fail_on(text: str) -> frozenset[str]:
    from outbox_relay.observe.report import parse_fail_on

    try:
        return parse_fail_on(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _at_least(minimum: int) -> type[int]:
    def check(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return check  # type: ignore[return-value]


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


def _status(args: argparse.Namespace) -> int:
    from outbox_relay.observe.report import Thresholds

    return print_status(profile(args), as_json=args.json,
                        thresholds=Thresholds(args.max_age_s, args.fail_on),
                        with_rates=not args.no_delta, exact_up_to=args.exact_up_to,
                        count_budget=args.count_budget)


def print_status(config: Config, *, as_json: bool = False, thresholds: Thresholds | None = None,
                 with_rates: bool = True, exact_up_to: int = EXACT_UP_TO,
                 count_budget: int = COUNT_BUDGET) -> int:
    """`outbox-relay status`: the table (or JSON) on stdout, problems on stderr; the exit
    code. Also what `demo` prints after its drain. A profile of several databases shows
    each under its name; one that cannot be read is said so, and the others shown."""
    from outbox_relay.observe.report import Thresholds, problems, table, to_json

    thresholds = thresholds or Thresholds()
    code: int = ExitCode.OK
    documents: dict[str, object] = {}
    for name, one in every_database(config, os.environ):
        try:
            snapshot = _snapshot(one, with_rates, exact_up_to, count_budget)
        except RelayError as exc:
            if name is None:
                raise
            print(f"database {name}: unreadable: {first_line(exc)}", file=sys.stderr)
            documents[name] = {"error": first_line(exc)}
            code = code or exit_code_for(exc)
            continue
        if as_json:
            documents[name or ""] = to_json(snapshot, thresholds)
        else:
            print(table(snapshot) if name is None else f"database {name}\n{table(snapshot)}")
        found = problems(snapshot, thresholds)
        for line in found:
            print(f"unhealthy: {'' if name is None else f'database {name}: '}{line}",
                  file=sys.stderr)
        code = code or (ExitCode.UNHEALTHY if found else ExitCode.OK)
    if as_json:
        print(json.dumps(documents[""] if not config.many else {"databases": documents},
                         indent=2))
    return code


def _snapshot(config: Config, with_rates: bool, exact_up_to: int,
              count_budget: int) -> Snapshot:
    from outbox_relay.observe.status import take_snapshot

    db = Database(config.postgres, "outbox-relay-status")
    try:
        require_current(db)
        return take_snapshot(db, config.relay.lock_timeout_s, config.ledger.path,
                             with_rates=with_rates, exact_up_to=exact_up_to,
                             count_budget=count_budget)
    finally:
        db.close()


def _serve(args: argparse.Namespace) -> int:
    """One database's outbox state, or, for a profile of several (and no --database),
    every database's in one exposition with a `database` label, a catalog's read again
    every `catalog.databases_refresh_s` (outbox_relay.observe.served); a database it
    cannot read shows as outbox_relay_database_up 0 there."""
    from prometheus_client import generate_latest, start_http_server

    from outbox_relay.observe.served import ServedDatabases, opened, status_registry

    config = profile(args)
    limit = args.max_label_topics or config.metrics.max_label_topics
    served = ServedDatabases(config, os.environ, limit) if config.many else None
    db = None
    try:
        if served is not None:
            served.refresh()
            registry = served.metrics.registry
        else:
            db = opened(None, config)
            registry = status_registry(db, config, limit)
        if args.once:
            sys.stdout.write(generate_latest(registry).decode("utf-8"))
            return ExitCode.OK
        try:
            server, thread = start_http_server(args.port, addr=args.host, registry=registry)
        except OSError as exc:
            raise RelayError(f"cannot serve metrics on {args.host}:{args.port}: "
                             f"{exc.strerror or exc}") from None
        print(f"serving http://{args.host}:{server.server_port}/metrics", flush=True)
        if served is not None and served.refresh_s is not None:
            _wait_for_stop(served.refresh_s, served.refresh)
        else:
            _wait_for_stop()
        server.shutdown()
        thread.join(timeout=5)
        return ExitCode.OK
    finally:
        if served is not None:
            served.close()
        if db is not None:
            db.close()


def _wait_for_stop(every_s: float = 1.0, tick: Callable[[], None] | None = None) -> None:
    """Until SIGTERM or SIGINT, calling `tick` every `every_s` meanwhile: the signal
    handler only sets the flag."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    while not stop.wait(every_s):
        if tick is not None:
            tick()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = sub.add_parser("status", help="backlog, age, state, parked, ledger rates and "
                            "the database's horizon, per topic (no JVM)")
    status.add_argument("--json", action="store_true", help="full JSON instead of a table")
    status.add_argument("--max-age-s", type=_seconds, metavar="N",
                        help=f"exit {int(ExitCode.UNHEALTHY)} if a topic's oldest waiting "
                        "message is older than N seconds")
    status.add_argument("--fail-on", type=_fail_on, default=frozenset(), metavar="LIST",
                        help=f"exit {int(ExitCode.UNHEALTHY)} if a topic is in one of these "
                        "conditions: backoff, parked (comma-separated)")
    status.add_argument("--no-delta", action="store_true",
                        help="leave the Delta ledger out of the rates (staged records only)")
    status.add_argument("--exact-up-to", type=_at_least(1), default=EXACT_UP_TO, metavar="N",
                        help="count each topic's backlog exactly up to N rows, then estimate "
                        f"(default {EXACT_UP_TO:,})")
    status.add_argument("--count-budget", type=_at_least(1), default=COUNT_BUDGET, metavar="N",
                        help="count at most about N rows in all, shared by the topics; the "
                        f"rest is estimated (default {COUNT_BUDGET:,})")
    status.set_defaults(fn=_status)

    metrics = sub.add_parser("metrics", help="Prometheus metrics of the outbox database")
    msub = metrics.add_subparsers(dest="metrics_cmd", required=True)
    serve = msub.add_parser("serve", help="serve the outbox's state (backlog, age, errors, "
                            "parked, horizon) over HTTP: the standing exporter every "
                            "deployment runs beside the relay (deploy/)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=_at_least(0), default=DEFAULT_METRICS_PORT,
                       help=f"default {DEFAULT_METRICS_PORT}; 0 picks a free port (printed)")
    serve.add_argument("--once", action="store_true",
                       help="print one scrape to stdout and exit (e.g. for a textfile collector)")
    # --top-topics: its name before the cap stopped ranking by backlog; kept for old units.
    serve.add_argument("--max-label-topics", "--top-topics", type=_at_least(1), metavar="N",
                       help="the first N topics seen keep a topic label, the rest are summed "
                       "into topic=\"(other)\" (default: the profile's "
                       f"metrics.max_label_topics, {DEFAULT_TOP_TOPICS} unless set)")
    serve.set_defaults(fn=_serve)
