"""Databases of the stack's PostgreSQL for the tests of a relay of several, and their
profile."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from outbox_relay.config.databases import source_of
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate
from outbox_relay.stack import StackInfo
from tests.integration.helpers import Msg, order_report
from tests.kafka_readback import Received

SOURCE = "test-many"
SOURCE_HEADER = "outbox-relay.source"
Databases = Callable[[int], list[tuple[str, str]]]
# A catalog of tenants ([catalog]): its table, and a database added to it or removed.
TENANTS = "CREATE TABLE tenants (name text PRIMARY KEY, url text NOT NULL, active bool)"
ADD = "INSERT INTO tenants (name, url, active) VALUES (%s, %s, true)"
REMOVE = "UPDATE tenants SET active = false WHERE name = %s"
CATALOG_QUERY = "SELECT name, url FROM tenants WHERE active ORDER BY name"


def profile_data(stack: StackInfo, tmp_path: Path, entries: list[tuple[str, str]],
             topics: list[str], **relay: Any) -> dict[str, Any]:
    return {
        "postgres": {"sslmode": "disable"},
        "kafka": {"bootstrap_servers": stack.kafka_bootstrap, "delivery_timeout_ms": 20000,
                  "request_timeout_ms": 10000, "admin_timeout_s": 5},
        "ledger": {"path": str(tmp_path / "ledger"), "flush_interval_s": 2},
        "relay": {"source_name": SOURCE, "checkpoint_path": str(tmp_path / "checkpoint"),
                  "poll_interval_s": 0.1, "lock_timeout_s": 20, "heartbeat_interval_s": 2,
                  "backoff_base_s": 0.5, "backoff_max_s": 2, "available_now_deadline_s": 5,
                  "include_topics": [t.replace(".", "\\.") for t in topics], **relay},
        "databases": [{"name": name, "url": url} for name, url in entries],
    }


def migrate_url(url: str) -> None:
    db = Database(build_config({"postgres": {"url": url}}, env={}).postgres)
    try:
        migrate(db)
    finally:
        db.close()


def by_database(records: Sequence[Received], source_name: str,
                names: Iterable[str]) -> dict[str, list[Received]]:
    """The records of each database, which their source header names; a record of no
    database of the relay fails the test."""
    of = {source_of(source_name, name): name for name in names}
    mine: dict[str, list[Received]] = defaultdict(list)
    for r in records:
        source = r.headers.get(SOURCE_HEADER, b"").decode(errors="replace")
        assert source in of, f"a record of no database of this relay: source {source!r}"
        mine[of[source]].append(r)
    return mine


def check_delivery(written: dict[str, dict[int, Msg]], got: Sequence[Received]) -> None:
    """Every id each database wrote was read back from Kafka, under its database's source
    header, with its topic and value, in per-key order within its database."""
    mine = by_database(got, SOURCE, written)
    for name, msgs in written.items():
        assert {r.outbox_id for r in mine[name]} == set(msgs), name
        assert all(r.topic == msgs[r.outbox_id].topic and r.value == msgs[r.outbox_id].value
                   for r in mine[name]), name
        assert order_report(msgs, mine[name])[:2] == (0, 0), name
