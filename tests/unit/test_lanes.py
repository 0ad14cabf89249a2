"""The drain lane's hand-offs, on a fake round and a fake Spark (no Spark, no network):
a topic is in one lane at a time, comes back once its claims no longer fill up, and a
defect or a stop ends the lane after its round in flight. A failure anywhere in the
lane's loop (its round or the pause after it) gives its topics back, is logged and
counted. With two drain lanes, each backlogged topic is in one of them, and one lane's
failure ends the other too."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from typing import Any, cast

import pytest

from outbox_relay.config import MetricsConfig, PostgresConfig
from outbox_relay.config.models import MAX_DRAIN_LANES
from outbox_relay.control.db import Database
from outbox_relay.control.pending import TopicState
from outbox_relay.errors import DatabaseError, DatabaseUnavailableError
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.stream import batch
from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.batch_settings import BatchSettings
from outbox_relay.stream.lanes import DRAIN_POOL, DrainLane
from outbox_relay.stream.round import Round
from outbox_relay.stream.stop import StopSignal
from outbox_relay.wiring import DRAIN_SUFFIX, lane_token, process_token


class _Spark:
    def __init__(self) -> None:
        self.sparkContext = self
        self.pools: list[str] = []

    def setLocalProperty(self, key: str, value: str) -> None:
        assert key == "spark.scheduler.pool"
        self.pools.append(value)


class _Rounds:
    """Each topic's claims fill up `full[topic]` times, then come back short."""

    def __init__(self, full: dict[str, int], fail: BaseException | None = None,
                 fail_make_way: BaseException | None = None) -> None:
        self.full = dict(full)
        self.fail = fail
        self.fail_make_way = fail_make_way  # raised by the first make_way only
        self.backlogged: frozenset[str] = frozenset()
        self.seen: list[frozenset[str]] = []
        self.made_way = 0
        self.in_round = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def run_once(self, bound: int | None = None, only: Collection[str] | None = None) -> bool:
        assert only is not None
        self.seen.append(frozenset(only))
        self.in_round.set()
        self.release.wait(10)
        if self.fail is not None:
            raise self.fail
        self.backlogged = frozenset(t for t in only if self.full.get(t, 0) > 1)
        for t in only:
            self.full[t] = self.full.get(t, 0) - 1
        return True

    def make_way(self) -> bool:
        self.made_way += 1
        fail, self.fail_make_way = self.fail_make_way, None
        if fail is not None:
            raise fail
        return False


def _lane(rounds: _Rounds, stop: StopSignal | None = None,
          metrics: RuntimeMetrics | None = None) -> tuple[DrainLane, _Spark]:
    spark = _Spark()
    return DrainLane(rounds, spark, stop or StopSignal(), poll_s=0.01, metrics=metrics), spark


def _ended_by_itself(lane: DrainLane) -> bool:
    """Whether the lane's thread ended without end(), which would end it anyway."""
    return lane.join(10)


def _failures(metrics: RuntimeMetrics, kind: str) -> float:
    value = metrics.registry.get_sample_value(
        "outbox_relay_lane_failures_total", {"lane": "drain", "kind": kind})
    return value or 0.0


def _until(cond: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_a_topic_drains_in_the_lane_until_its_claims_come_back_short() -> None:
    rounds = _Rounds({"big": 3, "other": 1})
    lane, spark = _lane(rounds)
    lane.start(time.monotonic() + 30, bound=None)
    lane.split.hand_over({"big", "other"})
    assert lane.busy
    _until(lambda: not lane.split.draining)
    lane.end()
    assert spark.pools == [DRAIN_POOL]
    # "other" came back after its first short claim, "big" after its third.
    assert rounds.seen[0] == {"big", "other"}
    assert rounds.seen[1:] == [frozenset({"big"})] * 2
    assert rounds.made_way == 3, "other relays get a chance between the lane's rounds"
    assert not lane.busy


def test_the_lane_hands_its_topics_back_when_it_ends_after_the_round_in_flight() -> None:
    rounds = _Rounds({"big": 100})
    lane, _ = _lane(rounds)
    lane.start(time.monotonic() + 30, bound=7)
    rounds.release.clear()
    lane.split.hand_over({"big"})
    assert rounds.in_round.wait(10)
    ender = threading.Thread(target=lane.end)
    ender.start()
    ender.join(0.1)  # end() may not return while the round is held
    assert ender.is_alive(), "end() must wait for the round in flight"
    assert lane.split.draining == {"big"}, "a topic mid-round is not the main lane's yet"
    rounds.release.set()
    ender.join(10)
    assert not ender.is_alive() and lane.split.draining == frozenset()
    assert len(rounds.seen) == 1


def test_a_stop_ends_the_lane_after_its_round_in_flight_without_end() -> None:
    stop = StopSignal()
    rounds = _Rounds({"big": 10**6})
    lane, _ = _lane(rounds, stop)
    lane.start(time.monotonic() + 30, bound=None)
    rounds.release.clear()
    lane.split.hand_over({"big"})
    assert rounds.in_round.wait(10)
    stop.request("test")
    rounds.release.set()
    assert _ended_by_itself(lane), "the lane ran on after the stop"
    assert len(rounds.seen) == 1, "a round started after the stop"
    lane.end()


def test_a_defect_in_a_drain_round_is_raised_by_end_with_the_topics_given_back() -> None:
    rounds = _Rounds({"big": 5}, fail=RuntimeError("a defect"))
    lane, _ = _lane(rounds)
    lane.start(time.monotonic() + 30, bound=None)
    lane.split.hand_over({"big"})
    _until(lambda: lane.failure is not None)
    assert lane.split.draining == frozenset()
    with pytest.raises(RuntimeError, match="a defect"):
        lane.end()


def test_a_database_error_gives_the_topics_back_to_the_main_lane() -> None:
    rounds = _Rounds({"big": 5}, fail=DatabaseUnavailableError("down"))
    lane, _ = _lane(rounds)
    lane.start(time.monotonic() + 30, bound=None)
    lane.split.hand_over({"big"})
    _until(lambda: rounds.seen and not lane.split.draining)
    lane.end()  # no defect: nothing raised
    assert lane.failure is None


def test_the_lane_ends_at_its_deadline_and_never_starts_a_round_after_it() -> None:
    rounds = _Rounds({"big": 10**6})
    lane, _ = _lane(rounds)
    lane.split.hand_over({"big"})  # work waits from the start
    lane.start(time.monotonic() - 1, bound=None)
    assert _ended_by_itself(lane), "the lane ran on past its deadline"
    assert rounds.seen == []
    lane.end()


def test_a_database_error_after_a_round_gives_the_topics_back_and_the_lane_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """make_way() reads pg_stat_activity on the lane's own connection after each round; a
    connection dropped there must not end the thread with its topics stranded."""
    metrics = RuntimeMetrics(MetricsConfig(), "test")
    rounds = _Rounds({"big": 10**6}, fail_make_way=DatabaseUnavailableError("dropped"))
    lane, _ = _lane(rounds, metrics=metrics)
    lane.start(time.monotonic() + 30, bound=None)
    with caplog.at_level(logging.ERROR, logger="outbox_relay.stream.lanes"):
        lane.split.hand_over({"big"})
        _until(lambda: rounds.made_way >= 1 and not lane.split.draining)
    assert lane.failure is None
    assert any("dropped" in r.getMessage() for r in caplog.records), caplog.text
    assert _failures(metrics, "database_lost") == 1
    lane.split.hand_over({"big"})  # the main lane hands it over again: the lane still works
    n = len(rounds.seen)
    _until(lambda: len(rounds.seen) > n)
    lane.end()


@pytest.mark.parametrize("fail", [RuntimeError("a defect"), DatabaseError("syntax")],
                         ids=["defect", "database-error"])
def test_a_failure_after_a_round_ends_the_lane_with_its_topics_back_and_end_raises_it(
    caplog: pytest.LogCaptureFixture, fail: Exception,
) -> None:
    metrics = RuntimeMetrics(MetricsConfig(), "test")
    rounds = _Rounds({"big": 10**6}, fail_make_way=fail)
    lane, _ = _lane(rounds, metrics=metrics)
    lane.start(time.monotonic() + 30, bound=None)
    with caplog.at_level(logging.ERROR, logger="outbox_relay.stream.lanes"):
        lane.split.hand_over({"big"})
        assert _ended_by_itself(lane), "the lane went on after a failure it cannot handle"
    assert lane.failure is fail
    assert lane.split.draining == frozenset()
    assert not lane.busy, "an available-now body would idle on a dead lane"
    assert any(str(fail) in r.getMessage() for r in caplog.records), caplog.text
    kind = "defect" if isinstance(fail, RuntimeError) else "database_error"
    assert _failures(metrics, kind) == 1
    with pytest.raises(type(fail)):
        lane.end()


def test_the_lane_counts_as_working_for_a_moment_after_it_emptied() -> None:
    """Between two batch bodies the lane holds nothing for a second or two; the ledger
    copier must not take that gap for the end of the drain."""
    lane, _ = _lane(_Rounds({}))
    assert not lane.split.held_within(10.0)  # never held anything
    lane.split.hand_over({"big"})
    assert lane.split.held_within(0.0)
    lane.split.give_back({"big"})
    assert lane.split.held_within(10.0)
    time.sleep(0.06)
    assert not lane.split.held_within(0.05)


class _Round:
    """Each round finds the backlog it is given; `held` keeps a round in flight."""

    def __init__(self) -> None:
        self.backlogged: frozenset[str] = frozenset()
        self.finds: frozenset[str] = frozenset()
        self.held = threading.Event()
        self.held.set()
        self.started = threading.Event()
        self.ran: list[list[str]] = []  # each round's ready topics

    def run(self, ready: list[str]) -> bool:
        self.ran.append(list(ready))
        self.backlogged = frozenset()  # as Round does: the last round's, once it ended
        self.started.set()
        self.held.wait(10)
        self.backlogged = self.finds
        return bool(ready)


# Never connected: the test's rounds make no statement (pending_topics is patched).
_NO_DB = Database(PostgresConfig())


def _processor(drain: DrainLane | None, *more: DrainLane) -> tuple[BatchProcessor, _Round]:
    rnd = _Round()
    settings = BatchSettings(micro_batch_s=1, poll_interval_s=0.01, lock_timeout_s=10,
                             include_topics=[".*"], exclude_topics=[])
    processor = BatchProcessor(_NO_DB, RuntimeMetrics(MetricsConfig(), "test"),
                               settings, lambda _finished: cast(Round, rnd), StopSignal(),
                               drains=[drain, *more] if drain is not None else [])
    return processor, rnd


def test_a_backlog_the_main_lane_found_counts_as_draining_until_a_round_finds_none() -> None:
    """The start-up round finds the backlog before any batch body starts the lane, and the
    next round may run longer than the lane's quiet time: the ledger copier (which asks
    `draining`) must not take the query's start, or that round, for the drain's end."""
    lane, _ = _lane(_Rounds({}))
    processor, rnd = _processor(lane)
    assert not processor.draining()
    rnd.finds = frozenset({"big"})
    processor.run_once(only=["big"])
    assert processor.draining()
    rnd.held.clear()
    rnd.started.clear()
    rnd.finds = frozenset()
    second = threading.Thread(target=processor.run_once, kwargs={"only": ["big"]})
    second.start()
    assert rnd.started.wait(10)
    assert processor.draining(), "a round in flight ends no backlog"
    rnd.held.set()
    second.join(10)
    assert not processor.draining()
    one_lane, rnd = _processor(None)
    rnd.finds = frozenset({"big"})
    one_lane.run_once(only=["big"])
    assert not one_lane.draining(), "without a drain lane nothing waits for one"


def _ready(*topics: str) -> list[TopicState]:
    return [TopicState(t, "ready", None, None, 0, 0.0, True) for t in topics]


def test_two_drain_lanes_share_the_backlog_each_topic_in_one_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The main lane's round finds four topics backlogged: each lane takes two, no topic is
    in both, and while they hold them the main lane's next round leaves all four out."""
    first, _ = _lane(_Rounds({}))
    second, _ = _lane(_Rounds({}))
    processor, rnd = _processor(first, second)
    topics = ("a", "b", "c", "d", "quiet")
    monkeypatch.setattr(batch, "pending_topics", lambda *_args: _ready(*topics))
    rnd.finds = frozenset({"a", "b", "c", "d"})
    processor.run_once()
    processor._hand_over(processor.backlogged)
    assert len(first.split.draining) == len(second.split.draining) == 2
    assert first.split.draining | second.split.draining == {"a", "b", "c", "d"}
    assert not first.split.draining & second.split.draining
    processor.run_once()
    assert rnd.ran[-1] == ["quiet"], "the main lane ran a topic a drain lane holds"
    first.split.give_back({"a", "b", "c", "d"})
    processor._hand_over({"e"})
    assert "e" in first.split.draining, "a new backlog goes to the lane holding the fewest"


def test_a_failed_drain_lane_does_not_leave_the_other_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One lane's defect ends the body: the other lane is ended too (its thread stops after
    its round in flight and its topics go back), and the defect is what the body raises."""
    defect = RuntimeError("a defect in a drain round")
    broken, _ = _lane(_Rounds({"x": 10**6}, fail=defect))
    healthy_rounds = _Rounds({"y": 10**6})
    healthy, _ = _lane(healthy_rounds)
    processor, rnd = _processor(broken, healthy)
    monkeypatch.setattr(batch, "pending_topics", lambda *_args: _ready("x", "y"))
    monkeypatch.setattr(batch, "relays_polling", lambda _db: 1)
    rnd.finds = frozenset({"x", "y"})
    with pytest.raises(RuntimeError, match="a defect in a drain round"):
        processor.run_rounds("body", 30)
    assert processor.failure is defect
    assert _ended_by_itself(healthy), "the healthy lane's thread still runs rounds"
    assert healthy_rounds.seen, "the healthy lane never ran"
    assert healthy.split.draining == frozenset()
    assert broken.split.draining == frozenset()


def test_every_lane_token_names_its_process() -> None:
    token = "relay-a@host:42:0123456789ab"
    lanes = [lane_token(token, lane) for lane in range(MAX_DRAIN_LANES)]
    assert len(set(lanes)) == MAX_DRAIN_LANES and token not in lanes
    assert all(t.endswith(DRAIN_SUFFIX) for t in lanes)
    assert {process_token(t) for t in [token, *lanes]} == {token}


class _FailsAfterTheLane(_Round):
    """The main lane's second round fails with `error` while a drain round is in flight;
    that drain round is released, to fail too, a moment after."""

    def __init__(self, error: BaseException, drain: _Rounds) -> None:
        super().__init__()
        self._error = error
        self._drain = drain

    def run(self, ready: list[str]) -> bool:
        if not self.ran:
            return super().run(ready)
        self.ran.append(list(ready))
        assert self._drain.in_round.wait(10), "the drain lane never ran"
        threading.Timer(0.2, self._drain.release.set).start()
        raise self._error


@pytest.mark.parametrize("first", ["main", "drain"])
def test_the_first_lane_to_fail_decides_what_the_body_raises(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, first: str,
) -> None:
    """Both lanes fail in one body: the error that came first is the body's (so the run's
    exit code names it), and the other one is logged, not lost."""
    defect = RuntimeError("a defect in a drain round")
    refused = DatabaseError("PostgreSQL refused the main lane's statement")
    drain_rounds = _Rounds({"x": 10**6}, fail=defect)
    drain, _ = _lane(drain_rounds)
    processor, rnd = _processor(drain)
    if first == "main":
        drain_rounds.release.clear()  # the drain round fails only after the main lane
        failing = _FailsAfterTheLane(refused, drain_rounds)
        failing.finds = frozenset({"x"})
        processor._round = cast(Round, failing)
    else:
        rnd.finds = frozenset({"x"})
    monkeypatch.setattr(batch, "pending_topics", lambda *_args: _ready("x", "y"))
    monkeypatch.setattr(batch, "relays_polling", lambda _db: 1)
    if first == "drain":
        # The main lane's next round waits for the drain lane's failure, then fails too.
        def fail_after_drain(ready: list[str]) -> bool:
            if not rnd.ran:
                return _Round.run(rnd, ready)
            _until(lambda: drain.failure is not None)
            raise refused

        monkeypatch.setattr(rnd, "run", fail_after_drain)
    expected = refused if first == "main" else defect
    with caplog.at_level(logging.ERROR), pytest.raises(type(expected)) as raised:
        processor.run_rounds("body", 30)
    assert raised.value is expected and processor.failure is expected
    other = defect if first == "main" else refused
    assert str(other) in caplog.text, "the other lane's failure was not logged"


class _Idle(_Round):
    """A round that never finds work, noting when each one ran."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def run(self, ready: list[str]) -> bool:
        self.at.append(time.monotonic())
        return False


def test_an_idle_continuous_body_polls_at_the_idle_interval_after_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While work may come a body polls every poll interval; after a second without any,
    only every idle interval: an idle relay's polls cost next to nothing."""
    monkeypatch.setattr(batch, "pending_topics", lambda *_args: [])
    monkeypatch.setattr(batch, "IDLE_AFTER_S", 0.3)
    idle = _Idle()
    settings = BatchSettings(micro_batch_s=1, poll_interval_s=0.02, lock_timeout_s=10,
                             include_topics=[".*"], exclude_topics=[],
                             idle_poll_interval_s=0.25)
    processor = BatchProcessor(_NO_DB, RuntimeMetrics(MetricsConfig(), "test"),
                               settings, lambda _finished: cast(Round, idle), StopSignal(),
                               continuous=True)
    began = time.monotonic()
    processor.run_rounds("body", 1.2)
    gaps = [b - a for a, b in zip(idle.at, idle.at[1:], strict=False)]
    early = [g for a, g in zip(idle.at, gaps, strict=False) if a - began < 0.25]
    # The last wait is cut short by the body's end.
    late = [g for a, g in zip(idle.at, gaps, strict=False)
            if a - began > 0.35 and a + g < began + 1.1]
    assert early and max(early) < 0.15, early
    assert late and min(late) >= 0.24, late


def test_rounds_until_a_body_waits_keep_their_drain_lanes_across_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start-up's rounds (outbox_relay.stream.starting) are one call that lasts until
    the query's first body waits (`until`): the drain lane runs beside all of them, not a
    poll interval's worth each that ends by waiting for its round in flight, and it ends
    with the call."""
    rounds = _Rounds({"big": 10**6})
    lane, _ = _lane(rounds)
    processor, rnd = _processor(lane)
    monkeypatch.setattr(batch, "pending_topics", lambda *_args: _ready("big", "busy"))
    monkeypatch.setattr(batch, "relays_polling", lambda _db: 1)
    rnd.finds = frozenset({"big"})
    threads: set[int] = set()

    def body_waits() -> bool:
        if lane._thread is not None:
            threads.add(lane._thread.ident or 0)
        return len(rounds.seen) >= 3

    began = time.monotonic()
    processor.run_rounds("start-up rounds", 30, until=body_waits)
    assert time.monotonic() - began < 10, "the call went on after `until` said so"
    assert len(threads) == 1, "the drain lane was started more than once"
    assert len(rounds.seen) >= 3 and all(s == {"big"} for s in rounds.seen)
    assert ["busy"] in rnd.ran, "the main lane's rounds did not go on beside the lane"
    assert lane.join(0), "the drain lane outlived the call"
    assert lane.split.draining == frozenset()
