"""The drain lane on the real stack: a topic with a backlog drains in rounds of its own
while the busy topics' rounds go on beside them, every key shape in order. Its faults
(a lock lost mid-round, a connection dropped after a round, a stop during its write)
are in test_drain_lane_faults.py.

What the lanes did is read from PostgreSQL while the relay runs (which token holds
which topic's lock), and what arrived from a consumer.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Self

import pytest

from outbox_relay.control.claims import Claim, TopicLimits
from outbox_relay.ledger.staging import COPY_LOCK_KEY
from outbox_relay.stack import StackInfo
from outbox_relay.stream import query as query_module
from outbox_relay.stream.delivery import Delivery, Outcome
from outbox_relay.stream.lanes import LANE_THREAD
from outbox_relay.stream.runner import EXIT_OK
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import DRAIN_SUFFIX, control_plane, process_token
from tests.integration.conftest import ConfigFactory, RelayRunner, run_in_thread
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

pytestmark = pytest.mark.integration

HOLDERS = "SELECT topic, locked_by FROM kafka_topic_info WHERE locked_by IS NOT NULL"
LEFT = "SELECT count(*) FROM kafka_messages WHERE topic = ANY(%s)"
STAGED = "SELECT count(*) FROM relay_ledger_staging"
_FIRST_BODY = re.compile(r"micro-batch \d+: rounds start")
_START_UP_ROUNDS = re.compile(r"start-up rounds: rounds start")
SAMPLE = ("SELECT (SELECT json_object_agg(topic, locked_by) FROM kafka_topic_info "
          "WHERE locked_by IS NOT NULL), "
          "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
          "AND objid = (%s::bigint & 4294967295)::oid), "
          "(SELECT max(id) FROM kafka_messages WHERE topic = ANY(%s)), "
          "(SELECT count(*) FROM kafka_messages WHERE topic = ANY(%s)), "
          "(SELECT count(*) FROM kafka_messages WHERE topic = ANY(%s) AND id <= %s)")


class _Sampler:
    """Calls `_sample` every 10 ms in a thread, from entering the block until leaving it."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._done.wait(0.01):
            self._sample()

    def _sample(self) -> None:
        raise NotImplementedError


class _LockWatch(_Sampler):
    """Samples the topics' lock holders until stopped: the moments when the big topic
    was held by a drain lane while a busy topic was held by that lane's process, or
    while busy rows were sent and deleted. The direct lane sends a busy round in a few
    milliseconds, so its lock is often held between two samples; its deletions are not
    missed. Each sample is one statement, so holders and rows come from one snapshot."""

    def __init__(self, url: str, big: str, busy: list[str]) -> None:
        super().__init__()
        self.url, self.big, self.busy = url, big, busy
        self.samples = 0
        self.tokens: set[str] = set()
        self.side_by_side = 0
        self.sent_beside = 0  # busy rows deleted while the drain lane held the big topic
        self.copies_beside_the_drain = 0  # samples: the ledger copier held its lock
        self._last: tuple[bool, int, int] = (False, 0, 0)  # drain held, max id, rows

    def _sample(self) -> None:
        _, last_max, last_rows = self._last
        holders_json, copying, busy_max, busy_rows, busy_kept = query(
            self.url, SAMPLE, (COPY_LOCK_KEY, self.busy, self.busy, self.busy, last_max))[0]
        holders: dict[str, str] = holders_json or {}
        self.samples += 1
        self.tokens |= set(holders.values())
        big = holders.get(self.big)
        drains = big is not None and big.endswith(DRAIN_SUFFIX)
        if drains and self._last[0] and busy_kept < last_rows:
            self.sent_beside += 1
        self._last = (drains, busy_max or 0, busy_rows)
        if big is None or not drains:
            return
        if copying:
            self.copies_beside_the_drain += 1
        if any(token == process_token(big)
               for topic, token in holders.items() if topic != self.big):
            self.side_by_side += 1


def _hold_first_drain_write(monkeypatch: pytest.MonkeyPatch, seen: Callable[[], bool]) -> None:
    """The drain lane's first write waits (up to 20 s, holding its topic's lock) until the
    sampler has `seen` it beside the busy topics: a short drain fell between two samples
    of a clean-clone CI run, on a machine loaded by the test session alone."""
    deliver = Delivery.deliver
    held = threading.Event()

    def held_once(self: Delivery, batch_id: int, sessions: list[Claim]) -> Outcome:
        if threading.current_thread().name == LANE_THREAD and not held.is_set():
            held.set()
            deadline = time.monotonic() + 20
            while not seen() and time.monotonic() < deadline:
                time.sleep(0.05)
        return deliver(self, batch_id, sessions)

    monkeypatch.setattr(Delivery, "deliver", held_once)


def _hold_query_start(monkeypatch: pytest.MonkeyPatch, seen: Callable[[], bool]
                      ) -> threading.Event:
    """The streaming query starts only once the sampler has `seen` the lanes side by side
    (or after 60 s): until then the start-up's rounds run, and the drain lane beside them.
    Returns what is set when the start went on because they were seen."""
    start = query_module.start_query
    before_start = threading.Event()

    def held(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 60
        while not seen() and time.monotonic() < deadline:
            time.sleep(0.05)
        if seen():
            before_start.set()
        return start(*args, **kwargs)

    monkeypatch.setattr(query_module, "start_query", held)
    return before_start


@pytest.mark.parametrize(("lanes", "comes"), [
    (True, _FIRST_BODY), (False, _FIRST_BODY), (True, _START_UP_ROUNDS)],
    ids=["drain-lane", "one-lane", "drain-lane-before-the-first-body"])
def test_a_backlog_drains_beside_the_busy_topics_every_key_in_order(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    lanes: bool, comes: re.Pattern[str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`comes`: the log line after which the backlog is written. Before the first body,
    the query's start waits until the lanes were seen side by side, so that the start-up's
    rounds must run the drain lane beside the busy topics (they once ended it every poll
    interval, waiting for its round in flight, and the busy topics with it)."""
    caplog.set_level(logging.DEBUG, logger="outbox_relay.stream.stop")
    big = unique("lane-big")
    busy = [unique(f"lane-busy{i}") for i in range(3)]
    create_topics(stack.kafka_bootstrap, {big: 3, **dict.fromkeys(busy, 2)})
    backlog = every_key_shape([big], 6_000)
    # Copies due every 30 s (the first at once), which wait for a working drain lane up
    # to 5 intervals: none may run beside it, and one follows once it is quiet.
    # The backlog's full claims go to the executors, the busy topics' waves to the
    # driver's producer, as when a backlog and a trickle share one relay. In one lane,
    # every round holds both: its Spark job must read the backlog's rows alone (it read
    # the whole batch, and sent the busy rows a second time).
    config = make_config([big, *busy], relay={
        "batch_size": 1000, "micro_batch_s": 600, "poll_interval_s": 0.05,
        "drain_lane": lanes, "direct_max_rows": 100}, ledger={"flush_interval_s": 30})
    stop = StopSignal()
    with _LockWatch(migrated_url, big, busy) as watch:

        def seen() -> bool:
            return watch.side_by_side + watch.sent_beside > 0

        _hold_first_drain_write(monkeypatch, seen)
        before_start = _hold_query_start(monkeypatch, seen) if comes is _START_UP_ROUNDS \
            else None
        thread, results = run_in_thread(lambda: run_relay(config, available_now=False,
                                                          stop=stop))
        try:
            # The backlog comes in one transaction, once the rounds that must take it run:
            # before them, the driver's producer alone would send it (on a loaded
            # machine, all of it).
            assert wait_for(lambda: any(comes.fullmatch(r.getMessage())
                                        for r in list(caplog.records)), 120, 0.1), (
                f"the relay never logged {comes.pattern!r}")
            written = dict(zip(insert(migrated_url, [backlog]), backlog, strict=True))
            # The busy topics write small waves, every key shape, until the backlog is gone.
            wave = 0
            while query(migrated_url, LEFT, ([big],))[0][0] > 0:
                assert thread.is_alive(), "the relay ended during the drain"
                msgs = [replace(m, value=m.value and m.value + f"/{wave}".encode())
                        for m in every_key_shape(busy, 6)]
                written |= dict(zip(insert(migrated_url, [msgs]), msgs, strict=True))
                wave += 1
                time.sleep(0.05)
            assert wait_for(lambda: query(migrated_url, LEFT, ([big, *busy],))[0][0] == 0,
                            120, 0.1)
            assert wait_for(lambda: query(migrated_url, STAGED)[0][0] == 0, 60, 0.2), (
                "the ledger copy never followed the drain")
        finally:
            stop.request("test")
            thread.join(120)
    assert results and results[0].exit_code == EXIT_OK

    got = consume(stack.kafka_bootstrap, [big, *busy], expect=len(written))
    assert sorted(r.outbox_id for r in got) == sorted(written), "lost or duplicated"
    inversions, spread, _ = order_report(written, got)
    assert (inversions, spread) == (0, 0)
    assert query(migrated_url, "SELECT count(*) FROM relay_sessions")[0][0] == 0
    assert query(migrated_url, "SELECT count(*) FROM kafka_topic_info WHERE topic = ANY(%s) "
                 "AND locked_by IS NOT NULL", ([big, *busy],))[0][0] == 0
    drain_tokens = {t for t in watch.tokens if t.endswith(DRAIN_SUFFIX)}
    if lanes:
        assert wave >= 5, f"only {wave} waves of busy messages during the drain"
        assert watch.side_by_side + watch.sent_beside > 0, (
            f"never saw the drain lane hold {big} while its process held or sent a busy "
            f"topic ({watch.samples} samples, tokens {sorted(watch.tokens)})")
        assert watch.copies_beside_the_drain == 0, "a ledger copy ran beside the drain lane"
        assert before_start is None or before_start.is_set(), (
            "the start-up's rounds never ran the drain lane beside the busy topics")
    else:
        assert not drain_tokens and watch.side_by_side == watch.sent_beside == 0


class _LaneWatch(_Sampler):
    """Samples which tokens hold the topics' locks until stopped; `together` counts the
    samples in which two drain lanes of one process held topics at once."""

    def __init__(self, url: str, topics: list[str]) -> None:
        super().__init__()
        self.url, self.topics = url, topics
        self.together = 0
        self.lanes: set[str] = set()

    def _sample(self) -> None:
        held = {token for topic, token in query(self.url, HOLDERS) if topic in self.topics}
        lanes = {t for t in held if t.endswith(DRAIN_SUFFIX)}
        self.lanes |= lanes
        if len(lanes) >= 2 and len({process_token(t) for t in lanes}) == 1:
            self.together += 1


def test_backlogged_topics_drain_in_two_lanes_at_once_every_key_in_order(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    """Four topics with a backlog each, every key shape: the two drain lanes (the default)
    take them between them and run side by side, and the consumer reads every message
    once, each key in order, with nothing left in the outbox."""
    topics = [unique(f"lanes{i}") for i in range(4)]
    create_topics(stack.kafka_bootstrap, dict.fromkeys(topics, 3))
    backlog = every_key_shape(topics, 3_000)
    written = dict(zip(insert(migrated_url, [backlog[i:i + 500]
                                             for i in range(0, len(backlog), 500)]),
                       backlog, strict=True))
    config = make_config(topics, relay={"batch_size": 150, "poll_interval_s": 0.05})
    assert config.relay.drain_lane and config.relay.drain_lanes == 2
    with _LaneWatch(migrated_url, topics) as watch:
        result = run_relay(config)
    assert result.exit_code == EXIT_OK
    assert len(watch.lanes) == 2, f"drain lanes seen: {sorted(watch.lanes)}"
    assert watch.together > 0, "the two drain lanes never held topics at the same time"
    got = consume(stack.kafka_bootstrap, topics, expect=len(written))
    assert sorted(r.outbox_id for r in got) == sorted(written), "lost or duplicated"
    inversions, spread, _ = order_report(written, got)
    assert (inversions, spread) == (0, 0)
    assert query(migrated_url, LEFT, (topics,))[0][0] == 0
    assert query(migrated_url, "SELECT count(*) FROM relay_sessions")[0][0] == 0


@pytest.mark.parametrize(("limit", "batch_bytes", "more"), [
    (4, 10_000_000, True),    # the row limit cut the claim
    (100, 10_000_000, False),  # the claim took every row
    (100, 2_500, True),       # the byte limit cut it (1 KB rows)
], ids=["rows", "all", "bytes"])
def test_a_claim_says_whether_it_stopped_at_its_limit(
    migrated_url: str, make_config: ConfigFactory, limit: int, batch_bytes: int, more: bool,
) -> None:
    """Claim.more is what moves a topic to the drain lane."""
    topic = unique("lane-claim")
    insert(migrated_url, [[Msg(topic, f"k{i}".encode(), b"x" * 1000) for i in range(10)]])
    config = make_config([topic])
    plane = control_plane(config, "lane-claim-test", "test-lane-claim")
    try:
        assert plane.locks.acquire([topic]) == [topic]
        batch = plane.claims.claim([TopicLimits(topic, 1_000_000, False)], limit, batch_bytes)
        (claim,) = batch.sessions
        assert claim.rows < 10 if more else claim.rows == 10
        assert claim.more is more
    finally:
        plane.db.close()
