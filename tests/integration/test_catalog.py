"""Databases from a catalog, on the real stack: a tenants table lists them, and the
continuous relay takes up a database added to it, and lets go of one removed, without a
restart. What reaches Kafka is read back by a consumer."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from outbox_relay.config.load import build_config
from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.session import SparkSource
from outbox_relay.stack import StackInfo
from outbox_relay.stream.many import ManyResult, run_many
from outbox_relay.stream.stop import StopSignal
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique, wait_for
from tests.integration.many import (
    ADD,
    CATALOG_QUERY,
    REMOVE,
    SOURCE,
    SOURCE_HEADER,
    TENANTS,
    Databases,
    migrate_url,
    profile_data,
)

pytestmark = pytest.mark.integration

LOCKED = "SELECT count(*) FROM kafka_topic_info WHERE locked_by IS NOT NULL"
RELAY_BACKENDS = """SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND application_name LIKE 'outbox-relay%%' AND pid <> pg_backend_pid()"""
REFRESH_S = 1.0


def test_a_database_added_to_the_catalog_is_relayed_and_one_removed_is_let_go(
    stack: StackInfo, databases: Databases, spark: SparkSession, tmp_path: Path,
) -> None:
    [(_, catalog_url), first, second] = databases(3)
    for _, url in (first, second):
        migrate_url(url)
    query(catalog_url, TENANTS)
    query(catalog_url, ADD, ("t-first", first[1]))
    topic = unique("catalog")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    data = profile_data(stack, tmp_path, [], [topic])
    del data["databases"]
    data["catalog"] = {"url": catalog_url, "databases_refresh_s": REFRESH_S,
                       "query": CATALOG_QUERY}
    config = build_config(data, env={})
    stop = StopSignal()
    results: list[ManyResult] = []
    runner = threading.Thread(target=lambda: results.append(
        run_many(config, False, stop, SparkSource.of(spark), env={})), daemon=True)
    runner.start()
    try:
        insert(first[1], [[Msg(topic, b"a", b"first-1")]])
        assert _values(stack, topic, 1) == {("t-first", b"first-1")}

        query(catalog_url, ADD, ("t-second", second[1]))
        insert(second[1], [[Msg(topic, b"a", b"second-1")]])
        assert _values(stack, topic, 2) == {("t-first", b"first-1"), ("t-second", b"second-1")}

        query(catalog_url, REMOVE, ("t-first",))
        # Let go: its relay's locks released, and what it is given now stays there.
        assert wait_for(lambda: _stopped(first[1]), 30, 0.2)
        insert(first[1], [[Msg(topic, b"a", b"first-2")]])
        insert(second[1], [[Msg(topic, b"a", b"second-2")]])
        got = _values(stack, topic, 3)
        assert ("t-second", b"second-2") in got and ("t-first", b"first-2") not in got
        assert query(first[1], "SELECT count(*) FROM kafka_messages") == [(1,)]
        assert query(first[1], LOCKED) == [(0,)]
    finally:
        stop.request("the test's end")
        runner.join(60)
    assert results and results[0].exit_code == ExitCode.OK


def _stopped(url: str) -> bool:
    """The removed database's relay closed every connection it had to it."""
    return query(url, RELAY_BACKENDS)[0][0] == 0


def _values(stack: StackInfo, topic: str, expect: int) -> set[tuple[str, bytes | None]]:
    got = consume(stack.kafka_bootstrap, [topic], expect=expect, timeout_s=30)
    return {(r.headers[SOURCE_HEADER].decode().removeprefix(f"{SOURCE}/"), r.value)
            for r in got}
