"""The idle watch (outbox_relay.control.idle_watch) on the real stack: one thread polls the
parked databases' outboxes, wakes only the one whose outbox has work for its relay, and
no database's slow or broken scan holds up another's. Then a relay of several databases
end to end: its idle databases park, and a message of any key shape written to one of
them wakes it and reaches Kafka in key order (a consumer reads it back)."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from pyspark.sql import SparkSession

from outbox_relay.config.load import build_config
from outbox_relay.control.idle_watch import APPLICATION_NAME, IdlePoll, IdleWatch
from outbox_relay.control.pending import TopicFilter, pending_params
from outbox_relay.launch.session import SparkSource
from outbox_relay.stack import StackInfo
from outbox_relay.stream.many import run_many
from outbox_relay.stream.stop import StopSignal
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    every_key_shape,
    insert,
    order_report,
    query,
    unique,
    wait_for,
)
from tests.integration.many import Databases, migrate_url, profile_data

pytestmark = pytest.mark.integration

INTERVAL_S = 0.1


class _Parked:
    """A spot parked in `watch` from a thread of its own, as a database's thread parks."""

    def __init__(self, watch: IdleWatch, url: str, include: str, up_to_s: float = 60.0
                 ) -> None:
        pg = build_config({"postgres": {"url": url, "sslmode": "disable"}}, env={}).postgres
        self.spot = IdlePoll(pg, pending_params(20.0), TopicFilter([include], []), INTERVAL_S)
        self.spot.connect()
        self.stop = threading.Event()
        self.why: str | None = None
        self.woken_at = 0.0
        self._thread = threading.Thread(target=self._park, args=(watch, up_to_s), daemon=True)
        self._thread.start()

    def _park(self, watch: IdleWatch, up_to_s: float) -> None:
        self.why = watch.park(self.spot, self.stop.is_set, up_to_s)
        self.woken_at = time.monotonic()

    def woken(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


@pytest.fixture
def watch() -> Iterator[IdleWatch]:
    w = IdleWatch()
    yield w
    w.close()


def _outboxes(databases: Databases, n: int) -> list[str]:
    urls = [url for _, url in databases(n)]
    for url in urls:
        migrate_url(url)
    return urls


def _polled(url: str) -> bool:
    """Whether the watch's connection to `url` scanned it within the last second."""
    return bool(query(url, "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                           " AND application_name = %s AND query_start > now() - "
                           "interval '1 second'", (APPLICATION_NAME,)))


def test_only_the_database_whose_outbox_has_work_for_it_is_woken(
        databases: Databases, watch: IdleWatch) -> None:
    quiet, busy = _outboxes(databases, 2)
    mine = unique("idle")
    a, b = _Parked(watch, quiet, f"{mine}.*"), _Parked(watch, busy, f"{mine}.*")
    assert wait_for(lambda: _polled(quiet) and _polled(busy), 10, 0.1)
    # Rows of a topic the relay does not serve wake nobody.
    insert(busy, [[Msg("someone-else", b"k", b"v")]])
    assert not b.woken(1.0) and watch.parked == 2
    written = time.monotonic()
    insert(busy, [[Msg(f"{mine}.t", b"k", b"v")]])
    assert b.woken(5.0) and b.why == "its outbox has work"
    assert b.woken_at - written < 2.0
    assert b.spot.connected  # handed back idle: its next park reuses it
    assert not a.woken(0.5) and watch.parked == 1
    a.stop.set()
    assert a.woken(2.0) and a.why == "its stop came"
    assert watch.parked == 0


def test_a_scan_held_up_delays_no_other_database_and_a_broken_one_wakes_its_own(
        databases: Databases, watch: IdleWatch) -> None:
    held, other, broken = _outboxes(databases, 3)
    mine = unique("idle")
    # The held database's scan waits behind a lock for as long as the test holds it.
    blocker = psycopg2.connect(held)
    try:
        with blocker.cursor() as cur:
            cur.execute("LOCK TABLE kafka_messages IN ACCESS EXCLUSIVE MODE")
        slow = _Parked(watch, held, f"{mine}.*", up_to_s=3.0)
        b, c = _Parked(watch, other, f"{mine}.*"), _Parked(watch, broken, f"{mine}.*")
        assert wait_for(lambda: _polled(other) and _polled(broken), 10, 0.1)
        written = time.monotonic()
        insert(other, [[Msg(f"{mine}.t", b"k", b"v")]])
        assert b.woken(5.0) and b.why == "its outbox has work"
        assert b.woken_at - written < 2.0
        # Its park's time is up with its scan still in flight: that connection is given up.
        assert slow.woken(10.0) and slow.why == "its park's time is up"
        assert not slow.spot.connected
    finally:
        blocker.close()
    query(broken, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                  "datname = current_database() AND application_name = %s", (APPLICATION_NAME,))
    assert c.woken(5.0) and c.why is not None and c.why.startswith("its scan failed")
    assert not c.spot.connected and watch.parked == 0


def test_a_relay_of_several_databases_parks_them_and_a_write_wakes_its_database(
        stack: StackInfo, databases: Databases, spark: SparkSession, tmp_path: Path) -> None:
    entries = databases(3)
    for _, url in entries:
        migrate_url(url)
    topic = unique("idle")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    config = build_config(profile_data(stack, tmp_path, entries, [topic],
                                       idle_poll_interval_s=0.25), env={})
    stop = StopSignal()
    results = []
    runner = threading.Thread(target=lambda: results.append(
        run_many(config, False, stop, SparkSource.of(spark))), daemon=True)
    runner.start()
    try:
        urls = [url for _, url in entries]
        assert wait_for(lambda: all(_polled(url) for url in urls), 60, 0.2), "not parked"
        msgs = every_key_shape([topic], 20)
        ids = insert(urls[1], [msgs[i:i + 7] for i in range(0, len(msgs), 7)])
        got = consume(stack.kafka_bootstrap, [topic], expect=len(msgs), timeout_s=60)
        assert sorted(r.outbox_id for r in got) == sorted(ids)
        assert order_report(dict(zip(ids, msgs, strict=True)), got)[:2] == (0, 0)
        assert wait_for(lambda: query(urls[1], "SELECT count(*) FROM kafka_messages")
                        == [(0,)], 30, 0.2)
        # Idle again: the watch polls it once more.
        assert wait_for(lambda: _polled(urls[1]), 30, 0.2)
    finally:
        stop.request("the test's end")
        runner.join(60)
    assert results and results[0].exit_code == 0


def test_a_scan_connects_and_polls_with_descriptors_past_select_s_limit(
        databases: Databases, watch: IdleWatch) -> None:
    """A relay of a hundred databases holds over 1,024 descriptors; select(2) refused
    them ("filedescriptor out of range"), and every database whose scan connected past
    that failed its run."""
    (url,) = _outboxes(databases, 1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1200:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    pipes = [os.pipe() for _ in range(520)]
    try:
        mine = unique("idle")
        parked = _Parked(watch, url, f"{mine}.*")
        assert parked.spot.fileno() > 1024
        insert(url, [[Msg(f"{mine}.t", b"k", b"v")]])
        assert parked.woken(5.0) and parked.why == "its outbox has work"
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
