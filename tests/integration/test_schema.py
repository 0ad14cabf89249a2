"""The schema: an outbox that Deimos created is taken over in place, and migrate is
idempotent and safe to run twice at once."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import discover, migrate
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import RelayRunner
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique

pytestmark = pytest.mark.integration

ALL_MIGRATIONS = [f"{m.version:04d}_{m.name}" for m in discover()]

# What Rails emits for PostgreSQL when it runs Deimos's generated migration
# (`rails g deimos:db_backend`): t.string -> character varying, t.binary -> bytea,
# t.datetime / t.timestamps -> timestamp(6) without time zone, NOT NULL timestamps
# without a default (ActiveRecord fills them in), and Rails' index names.
DEIMOS_MIGRATION = """
CREATE TABLE "schema_migrations" ("version" character varying NOT NULL PRIMARY KEY);
CREATE TABLE "kafka_messages" (
    "id" bigserial primary key,
    "topic" character varying NOT NULL,
    "message" bytea,
    "key" bytea,
    "partition_key" character varying,
    "created_at" timestamp(6) NOT NULL,
    "updated_at" timestamp(6) NOT NULL
);
CREATE INDEX "index_kafka_messages_on_topic_and_id" ON "kafka_messages" ("topic", "id");
CREATE TABLE "kafka_topic_info" (
    "id" bigserial primary key,
    "topic" character varying NOT NULL,
    "locked_by" character varying,
    "locked_at" timestamp(6),
    "error" boolean DEFAULT FALSE NOT NULL,
    "retries" integer DEFAULT 0 NOT NULL,
    "last_processed_at" timestamp(6)
);
CREATE UNIQUE INDEX "index_kafka_topic_info_on_topic" ON "kafka_topic_info" ("topic");
CREATE INDEX "index_kafka_topic_info_on_locked_by_and_error"
    ON "kafka_topic_info" ("locked_by", "error");
CREATE INDEX "index_kafka_topic_info_on_locked_at" ON "kafka_topic_info" ("locked_at");
INSERT INTO "schema_migrations" ("version") VALUES ('20190401120000');
"""

# ActiveRecord's INSERT: explicit UTC timestamps, no headers, no transaction id.
DEIMOS_INSERT = """
INSERT INTO "kafka_messages" ("topic", "message", "key", "partition_key", "created_at",
                              "updated_at")
VALUES (%s, %s, %s, %s, %s, %s) RETURNING "id"
"""

ORIGINAL_COLUMNS = "id, topic, message, key, partition_key, created_at, updated_at"


def _config(stack: StackInfo, url: str, tmp_path: Path, topics: list[str]) -> Config:
    """The `make_config` defaults, for a database this test migrates itself."""
    return build_config({
        "postgres": {"url": url, "sslmode": "disable"},
        "kafka": {"bootstrap_servers": stack.kafka_bootstrap, "delivery_timeout_ms": 20000,
                  "request_timeout_ms": 10000, "admin_timeout_s": 5},
        "ledger": {"path": str(tmp_path / "ledger"), "flush_interval_s": 2},
        "relay": {
            "source_name": "test-deimos",
            "checkpoint_path": str(tmp_path / "checkpoint"),
            "poll_interval_s": 0.1,
            "lock_timeout_s": 20,
            "heartbeat_interval_s": 2,
            "backoff_base_s": 0.5,
            "backoff_max_s": 2,
            "available_now_deadline_s": 5,
            "include_topics": [t.replace(".", "\\.") for t in topics],
        },
    }, env={})


def _migrate(url: str) -> list[str]:
    db = Database(build_config({"postgres": {"url": url, "sslmode": "disable"}}, env={}).postgres)
    try:
        return migrate(db)
    finally:
        db.close()


def _execute(url: str, sql: str) -> None:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _catalog(url: str) -> list[tuple[Any, ...]]:
    """Tables, columns, defaults, indexes and views: what a migration could change."""
    return query(url, """
        SELECT 'column', table_name::text, column_name::text, data_type::text,
               coalesce(column_default, ''), is_nullable::text
        FROM information_schema.columns WHERE table_schema = 'public'
        UNION ALL
        SELECT 'index', tablename::text, indexname::text, indexdef, '', ''
        FROM pg_indexes WHERE schemaname = 'public'
        UNION ALL
        SELECT 'view', viewname::text, '', definition, '', ''
        FROM pg_views WHERE schemaname = 'public'
        ORDER BY 1, 2, 3
    """)


def test_deimos_outbox_is_upgraded_in_place_and_drained(
    stack: StackInfo, database_url: str, run_relay: RelayRunner, tmp_path: Path
) -> None:
    url = database_url
    _execute(url, DEIMOS_MIGRATION)
    errored, healthy = unique("deimos.errored"), unique("deimos.ok")
    create_topics(stack.kafka_bootstrap, {errored: 3, healthy: 2})
    base = datetime(2024, 3, 1, 12, 0, 0, 123456)
    rows = [
        (errored, b"\x0a\x03abc", b"widget-1", None),
        (healthy, b'{"id": 2}', b"2", "tenant-7"),
        (errored, None, b"widget-1", None),                   # a tombstone
        (healthy, b"\x00\xff binary \x00", b"\x01\x02", "tenant-\u00fc"),
        (errored, b"no key", None, None),
    ] + [(healthy, f"bulk-{i}".encode(), f"k{i % 7}".encode(), None) for i in range(40)]
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            ids = []
            for i, (topic, message, key, partition_key) in enumerate(rows):
                stamp = base + timedelta(seconds=i)
                cur.execute(DEIMOS_INSERT, (topic, message, key, partition_key, stamp, stamp))
                ids.append(cur.fetchone()[0])  # type: ignore[index]
            # Deimos's error path: error=true, unlocked, locked_at = when it failed.
            cur.execute(
                "INSERT INTO kafka_topic_info (topic, locked_by, locked_at, error, retries) "
                "VALUES (%s, NULL, (now() AT TIME ZONE 'UTC') - interval '1 hour', true, 3)",
                (errored,),
            )
            cur.execute(
                "INSERT INTO kafka_topic_info (topic, last_processed_at) "
                "VALUES (%s, (now() AT TIME ZONE 'UTC') - interval '1 day')",
                (healthy,),
            )
    finally:
        conn.close()
    before = query(url, f"SELECT {ORIGINAL_COLUMNS} FROM kafka_messages ORDER BY id")

    assert _migrate(url) == ALL_MIGRATIONS

    # Rows, topic state, Deimos's indexes and Rails' own bookkeeping are all kept.
    assert query(url, f"SELECT {ORIGINAL_COLUMNS} FROM kafka_messages ORDER BY id") == before
    assert query(url, "SELECT count(*) FROM kafka_messages "
                      "WHERE headers IS NOT NULL OR xact_id IS NOT NULL") == [(0,)]
    assert query(url, "SELECT error, retries, locked_by FROM kafka_topic_info WHERE topic = %s",
                 (errored,)) == [(True, 3, None)]
    assert query(url, "SELECT version FROM schema_migrations") == [("20190401120000",)]
    indexes = dict(query(url, "SELECT indexname, indexdef FROM pg_indexes "
                              "WHERE tablename IN ('kafka_messages', 'kafka_topic_info')"))
    for name in ("index_kafka_messages_on_topic_and_id", "index_kafka_topic_info_on_topic",
                 "index_kafka_topic_info_on_locked_by_and_error",
                 "index_kafka_topic_info_on_locked_at"):
        assert name in indexes
    assert sum("(topic, id)" in d for d in indexes.values()) == 1, "a duplicate (topic, id) index"
    assert sum("(topic)" in d for d in indexes.values()) == 1, "a duplicate topic index"
    # Both writers work after the upgrade: Deimos (explicit timestamps) and ours (defaults).
    ours = insert(url, [[Msg(healthy, b"2", b"after-upgrade", partition_key="tenant-7",
                             headers={"origin": "relay"})]])
    ids += [row[0] for row in query(
        url, DEIMOS_INSERT, (errored, b"deimos-after", b"widget-1", None, base, base))]
    ids += ours
    assert query(url, "SELECT count(*) FROM kafka_messages WHERE xact_id IS NOT NULL") == [(2,)]

    result = run_relay(_config(stack, url, tmp_path, [errored, healthy]))

    assert result.exit_code == EXIT_OK, result.left_over
    got = consume(stack.kafka_bootstrap, [errored, healthy], expect=len(ids))
    assert sorted(r.outbox_id for r in got) == sorted(ids), "lost or duplicated"
    sent = {r.outbox_id: r for r in got}
    for (topic, message, key, _), row_id in zip(rows, ids, strict=False):
        assert (sent[row_id].topic, sent[row_id].value, sent[row_id].key) == (topic, message, key)
    first = sent[ids[0]]
    assert first.headers["outbox-relay.created-at"] == b"2024-03-01T12:00:00.123456Z"
    assert sent[ours[0]].headers["origin"] == b"relay"
    assert query(url, "SELECT count(*) FROM kafka_messages") == [(0,)]
    state = dict((t, (e, r, lb)) for t, e, r, lb in query(
        url, "SELECT topic, error, retries, locked_by FROM kafka_topic_info"))
    assert state == {errored: (False, 0, None), healthy: (False, 0, None)}
    assert query(url, "SELECT count(*) FROM kafka_topic_info WHERE last_processed_at IS NULL "
                      "OR last_processed_at < (now() AT TIME ZONE 'UTC') - interval '1 minute'"
                 ) == [(0,)], "both topics were processed just now"


def test_migrate_twice_is_a_no_op(database_url: str) -> None:
    assert _migrate(database_url) == ALL_MIGRATIONS
    schema = _catalog(database_url)
    history = query(database_url, "SELECT version, applied_at FROM relay_schema_migrations "
                                  "ORDER BY version")

    assert _migrate(database_url) == []

    assert _catalog(database_url) == schema
    assert query(database_url, "SELECT version, applied_at FROM relay_schema_migrations "
                               "ORDER BY version") == history
    assert [v for v, _ in history] == [int(m[:4]) for m in ALL_MIGRATIONS]


def test_the_id_arrays_are_stored_out_of_line_without_compression(database_url: str) -> None:
    """0020: pglz compressed every claim's ids and every staged finish's."""
    _migrate(database_url)
    columns = [("relay_ledger_staging", "ids"), ("relay_ledger_staging", "partitioning_keys"),
               ("relay_sessions", "compacted_ids"), ("relay_sessions", "ids")]
    assert query(database_url, "SELECT attrelid::regclass::text, attname, attstorage "
                               "FROM pg_attribute WHERE attrelid::regclass::text = ANY(%s) "
                               "AND attname = ANY(%s) ORDER BY 1, 2",
                 ([t for t, _ in columns], [c for _, c in columns])) == [
        (table, column, "e") for table, column in columns]
    # A direct write's claim of 5,000 ids, of a size pglz compresses by default.
    query(database_url, "INSERT INTO relay_sessions (session_id, batch_id, topic, lock_token, "
                        "ids) SELECT gen_random_uuid(), 1, 't', 'token', array_agg(g) "
                        "FROM generate_series(1, 5000) g")
    assert query(database_url, "SELECT pg_column_compression(ids), pg_column_size(ids) > 40000 "
                               "FROM relay_sessions") == [(None, True)]


@pytest.mark.parametrize("attempt", range(3))
def test_two_concurrent_migrates_both_succeed(database_url: str, attempt: int) -> None:
    start = threading.Barrier(2)
    results: dict[int, list[str]] = {}
    failures: list[BaseException] = []

    def worker(n: int) -> None:
        db = Database(build_config({"postgres": {"url": database_url, "sslmode": "disable"}},
                                   env={}).postgres, f"migrate-{n}")
        try:
            db.one("SELECT 1")  # connected, so both reach migrate() together
            start.wait(timeout=30)
            results[n] = migrate(db)
        except BaseException as exc:  # reported below, with the thread's error
            failures.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert not failures, failures
    assert sorted(results.values(), key=len) == [[], ALL_MIGRATIONS], "exactly one applied all"
    assert query(database_url, "SELECT version, count(*) FROM relay_schema_migrations "
                               "GROUP BY version ORDER BY version") == [
        (int(m[:4]), 1) for m in ALL_MIGRATIONS
    ]
    assert query(database_url, "SELECT count(*) FROM kafka_messages") == [(0,)]
