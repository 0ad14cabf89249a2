"""The outbox's pending-topics scan (outbox_relay.control.pending), which every poll and round
runs, while a transaction elsewhere holds the horizon: the index entries of the rows a
drain deleted cannot be removed then, and the scan must not step over them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest

from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.pending import PENDING_TOPICS, TopicFilter, pending_topics
from tests.integration.helpers import query, unique

pytestmark = pytest.mark.integration

PER_TOPIC = 20_000
# What the scan may read: a few index pages per topic. Stepping over the deleted rows'
# entries, checking each in the heap, read about 5,000 here.
MAX_BUFFERS = 200


@pytest.fixture
def held_horizon(migrated_url: str) -> Iterator[None]:
    """A session that holds an xid, as a long transaction elsewhere in the database does."""
    held = psycopg2.connect(migrated_url)
    try:
        with held.cursor() as cur:
            cur.execute("SELECT pg_current_xact_id()")
        yield
    finally:
        held.rollback()
        held.close()


def test_pending_topics_reads_a_few_pages_while_a_held_horizon_keeps_the_deleted_rows(
    migrated_url: str, held_horizon: None,
) -> None:
    topics = sorted(unique("pending") for _ in range(3))
    # Interleaved ids, as concurrent writers leave them; then a drain's deletes: each
    # topic's lowest ids first, 90% of them.
    _insert_interleaved(migrated_url, topics)
    top = query(migrated_url, "SELECT max(id) FROM kafka_messages WHERE topic = ANY(%s)",
                (topics,))[0][0]
    first = top - 3 * PER_TOPIC + 1
    deleted_up_to = first + int(0.9 * 3 * PER_TOPIC)
    query(migrated_url, "DELETE FROM kafka_messages WHERE topic = ANY(%s) AND id < %s",
          (topics, deleted_up_to))
    config = build_config({"postgres": {"url": migrated_url, "sslmode": "disable"}}, env={})
    db = Database(config.postgres)
    try:
        mine = TopicFilter(topics, [])
        states = pending_topics(db, 60.0, mine)
        assert [s.topic for s in states] == topics
        assert all(s.below_bound and s.state == "ready" for s in states)
        # A bound below every row left: the topics are pending, none below the bound.
        assert not any(s.below_bound for s in pending_topics(db, 60.0, mine, deleted_up_to - 1))
        params = {"lock_timeout_s": 60.0, "bound": top}
        plan = db.all(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {PENDING_TOPICS}", params)
    finally:
        db.close()
    root = _plan(plan)
    buffers = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert buffers <= MAX_BUFFERS, json.dumps(root, indent=1)[:3000]


def _has_bitmap(node: dict[str, Any]) -> bool:
    return "Bitmap" in str(node.get("Node Type")) or any(
        _has_bitmap(child) for child in node.get("Plans", []))


def test_pending_topics_keeps_its_index_walk_after_an_analyze_of_a_nearly_empty_outbox(
    migrated_url: str,
) -> None:
    """A relay that keeps up leaves each topic a few live rows above many deleted ones.
    In a 2,000 msg/s soak, an autoanalyze at such a moment led the planner to a bitmap
    scan and a sort, which read every entry and heap page of each topic, dead ones too,
    on every call (0.3 ms became 171 ms a call, every other minute; bench SOAK with
    pg_stat_statements). A table this small does not make the planner choose it, so a
    plain session here is forced to the bitmap, to show what it costs; the relay's
    connections turn bitmap scans off, and must keep the index walk."""
    topics = sorted(unique("analyzed") for _ in range(10))
    _insert_interleaved(migrated_url, topics)
    query(migrated_url, """
        DELETE FROM kafka_messages m
        WHERE m.id < (SELECT max(n.id) - 30 FROM kafka_messages n WHERE n.topic = m.topic)
    """)
    query(migrated_url, "ANALYZE kafka_messages")
    params = {"lock_timeout_s": 60.0, "bound": 2**63 - 1}
    explain = f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {PENDING_TOPICS}"
    plain = psycopg2.connect(migrated_url)
    try:
        with plain.cursor() as cur:
            cur.execute("SET enable_indexscan = off")
            cur.execute("SET enable_indexonlyscan = off")
            cur.execute(explain, params)
            forced = _plan([{"plan": cur.fetchone()[0]}])
    finally:
        plain.close()
    assert _has_bitmap(forced)
    assert forced["Shared Hit Blocks"] + forced["Shared Read Blocks"] > 10 * MAX_BUFFERS
    config = build_config({"postgres": {"url": migrated_url, "sslmode": "disable"}}, env={})
    db = Database(config.postgres)
    try:
        assert db.one("SHOW enable_bitmapscan") == {"enable_bitmapscan": "off"}
        states = pending_topics(db, 60.0, TopicFilter(topics, []))
        root = _plan(db.all(explain, params))
    finally:
        db.close()
    assert [s.topic for s in states] == topics
    assert not _has_bitmap(root), json.dumps(root, indent=1)[:3000]
    buffers = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert buffers <= MAX_BUFFERS, json.dumps(root, indent=1)[:3000]


def _insert_interleaved(url: str, topics: list[str]) -> None:
    """PER_TOPIC rows for each topic, their ids interleaved across the topics."""
    query(url, """
        INSERT INTO kafka_messages (topic, key, message, created_at, updated_at)
        SELECT (%s::varchar[])[1 + g %% cardinality(%s::varchar[])], ('k' || g)::bytea,
               '\\x00'::bytea, now() AT TIME ZONE 'UTC', now() AT TIME ZONE 'UTC'
        FROM generate_series(1, %s) g
    """, (topics, topics, len(topics) * PER_TOPIC))


def _plan(rows: list[dict[str, object]]) -> dict[str, int]:
    (row,) = rows
    (value,) = row.values()
    document = json.loads(value) if isinstance(value, str) else value
    assert isinstance(document, list)
    return document[0]["Plan"]  # type: ignore[no-any-return]
