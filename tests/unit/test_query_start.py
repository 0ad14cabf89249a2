"""The query's start beside the first round (outbox_relay.stream.starting), on a fake query (no
Spark): one start however often a backlog asks, its error raised in the runner's thread,
and a failing run that stops what started; the warm-up's failure is a warning unless the
relay is stopping; the rounds an idle relay runs until the query's first body waits."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import cast

import pytest
from pyspark.sql.streaming.query import StreamingQuery

from outbox_relay.stream import starting
from outbox_relay.stream.starting import QueryStart, rounds_until_first_body, warm_up_in_background
from outbox_relay.stream.stop import StopSignal

# Generous: a loaded machine may be slow to schedule a thread; nothing here waits it out
# when the code is right.
JOIN_S = 10.0


class _Query:
    def __init__(self, stop_error: Exception | None = None) -> None:
        self.stopped = 0
        self.isActive = True
        self._stop_error = stop_error

    def stop(self) -> None:
        self.stopped += 1
        if self._stop_error is not None:
            raise self._stop_error


class _Start:
    """The start function: counts calls and their threads, may fail, may be held."""

    def __init__(self, query: _Query | None = None, error: BaseException | None = None) -> None:
        self.query = query or _Query()
        self.error = error
        self.calls = 0
        self.threads: list[str] = []
        self.release = threading.Event()
        self.release.set()

    @property
    def started(self) -> StreamingQuery:
        """The fake query, as the start function hands it out."""
        return cast(StreamingQuery, self.query)

    def __call__(self) -> StreamingQuery:
        self.calls += 1
        self.threads.append(threading.current_thread().name)
        assert self.release.wait(JOIN_S)
        if self.error is not None:
            raise self.error
        return self.started


def test_a_second_begin_does_not_start_the_query_again() -> None:
    start = _Start()
    starter = QueryStart(start, StopSignal())
    start.release.clear()  # the first start is still running when the second backlog asks
    starter.begin()
    starter.begin()
    start.release.set()
    starter.begin()
    assert starter.result() is start.started
    assert start.calls == 1
    assert starter.begun


def test_the_query_starts_in_a_thread_of_its_own_and_result_returns_it() -> None:
    start = _Start()
    starter = QueryStart(start, StopSignal())
    starter.begin()
    query = starter.result()
    assert query is start.started
    # Beside the round, not in it: the runner's thread goes on with its write meanwhile.
    assert start.threads == ["relay-query-start"]
    assert threading.current_thread().name not in start.threads
    assert starter.result() is query, "asking again gives the same query, no new start"
    assert start.calls == 1


def test_result_is_none_and_nothing_starts_when_never_begun() -> None:
    start = _Start()
    starter = QueryStart(start, StopSignal())
    assert not starter.begun
    assert starter.result() is None
    assert start.calls == 0


@pytest.mark.parametrize("error", [RuntimeError("the source's worker died"),
                                   KeyboardInterrupt()])
def test_the_start_s_error_is_raised_by_result_in_the_caller_s_thread(
    error: BaseException,
) -> None:
    starter = QueryStart(_Start(error=error), StopSignal())
    starter.begin()
    with pytest.raises(type(error)) as raised:
        starter.result()
    assert raised.value is error
    with pytest.raises(type(error)):
        starter.result()  # every ask sees the failure, never a None that looks like idle


def test_abandon_stops_a_query_that_started() -> None:
    start = _Start()
    starter = QueryStart(start, StopSignal())
    start.release.clear()
    starter.begin()
    # The run failed while the start was still under way: abandon waits for it.
    releaser = threading.Timer(0.05, start.release.set)
    releaser.start()
    starter.abandon()
    releaser.join(JOIN_S)
    assert start.query.stopped == 1


def test_abandon_swallows_the_start_s_error() -> None:
    start = _Start(error=RuntimeError("start failed"))
    starter = QueryStart(start, StopSignal())
    starter.begin()
    starter.abandon()  # the run's own error is the one to report: nothing raised here
    assert start.query.stopped == 0


def test_abandon_of_a_start_never_begun_does_nothing() -> None:
    start = _Start()
    QueryStart(start, StopSignal()).abandon()
    assert start.calls == 0
    assert start.query.stopped == 0


def test_abandon_logs_a_query_that_would_not_stop(caplog: pytest.LogCaptureFixture) -> None:
    start = _Start(_Query(stop_error=RuntimeError("py4j gone\nstack")))
    starter = QueryStart(start, StopSignal())
    starter.begin()
    with caplog.at_level(logging.WARNING, logger=starting.__name__):
        starter.abandon()
    assert start.query.stopped == 1
    assert [r.getMessage() for r in caplog.records] == [
        "could not stop the streaming query: py4j gone"]


def test_a_failed_warm_up_is_logged_as_a_warning_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def warm_up() -> None:
        raise RuntimeError("JDBC refused\ntraceback lines")

    with caplog.at_level(logging.DEBUG, logger=starting.__name__):
        thread = warm_up_in_background(warm_up, lambda: False)
        thread.join(JOIN_S)
    assert not thread.is_alive()
    assert thread.daemon, "a warm-up never holds the process's exit"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "the data plane's warm-up failed (the first write will be slower): JDBC refused"]


def test_a_warm_up_failing_because_the_relay_stops_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def warm_up() -> None:
        raise RuntimeError("the SparkContext was shut down")

    with caplog.at_level(logging.DEBUG, logger=starting.__name__):
        thread = warm_up_in_background(warm_up, lambda: True)
        thread.join(JOIN_S)
    assert not thread.is_alive()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_warm_up_that_succeeds_runs_once_and_warns_of_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []
    with caplog.at_level(logging.DEBUG, logger=starting.__name__):
        thread = warm_up_in_background(
            lambda: ran.append(threading.current_thread().name), lambda: False)
        thread.join(JOIN_S)
    assert ran == ["relay-warm-up"]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert "the data plane is warm" in [r.getMessage() for r in caplog.records]


class _Rounds:
    """The runner's rounds before the first body: records whether the query's start had
    begun at each, and holds the body's turn as run_rounds does. At round `body_at` a
    batch body arrives (a thread waiting for the turn) and ends the bridge."""

    def __init__(self, stop: StopSignal, starter: QueryStart, body_at: int = 3,
                 during_first: Callable[[StopSignal], None] | None = None) -> None:
        self.stop = stop
        self.starter = starter
        self.body_at = body_at
        self.during_first = during_first  # called inside the first round
        self.begun: list[bool] = []
        self.body: threading.Thread | None = None
        # What each call's `until` said at its end (None: the call had none, a poll's
        # worth of rounds).
        self.said: list[bool | None] = []

    def __call__(self, until: Callable[[], bool] | None) -> None:
        with self.stop.batch_body():
            self.begun.append(self.starter.begun)
            if len(self.begun) == 1 and self.during_first is not None:
                self.during_first(self.stop)
            if len(self.begun) == self.body_at:
                self.body = threading.Thread(target=self._body)
                self.body.start()
                deadline = time.monotonic() + JOIN_S
                while not self.stop.body_waiting and time.monotonic() < deadline:
                    time.sleep(0.01)
            self.said.append(None if until is None else until())

    def _body(self) -> None:
        with self.stop.batch_body():
            pass


def _warm(release: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=lambda: release.wait(JOIN_S), daemon=True)
    thread.start()
    return thread


def _bridge(start: _Start, warmed: threading.Event | None, body_at: int = 3,
            during_first: Callable[[StopSignal], None] | None = None,
            ) -> tuple[StopSignal, QueryStart, _Rounds, threading.Thread]:
    """rounds_until_first_body started in a thread, its warm-up ending at `warmed` (None:
    the direct lane's rounds, which wait for no warm-up)."""
    stop = StopSignal()
    starter = QueryStart(start, stop)
    rounds = _Rounds(stop, starter, body_at, during_first)
    warm = None if warmed is None else _warm(warmed)
    bridge = threading.Thread(
        target=rounds_until_first_body, args=(rounds, starter, stop, warm))
    bridge.start()
    return stop, starter, rounds, bridge


def test_rounds_wait_for_the_warm_up_then_run_until_the_first_body_waits() -> None:
    start = _Start()
    warmed = threading.Event()
    _, starter, rounds, bridge = _bridge(start, warmed)
    time.sleep(0.3)
    assert rounds.begun == [] and not starter.begun, "nothing before the warm-up ends"
    warmed.set()
    bridge.join(JOIN_S)
    assert not bridge.is_alive()
    # The first round goes out alone; the query starts after it, once.
    assert rounds.begun == [False, True, True]
    # The later ones run as a body's do, until it waits: only then does `until` say so.
    assert rounds.said == [None, False, True]
    assert starter.result() is start.started and start.calls == 1
    assert rounds.body is not None
    rounds.body.join(JOIN_S)
    assert not rounds.body.is_alive(), "the body ran once the bridge gave the turn back"


def test_the_direct_lanes_rounds_wait_for_no_warm_up() -> None:
    """The query's start and first trigger took 6 s on a quiet machine: at 1,000 msg/s
    from 5 s after launch, rows committed from 7.6 s to 13.3 s waited up to 6.1 s for
    the first body (p99 of the first minute 6 s; 0.10 s once these rounds ran)."""
    start = _Start()
    _, starter, rounds, bridge = _bridge(start, None)
    bridge.join(JOIN_S)
    assert not bridge.is_alive()
    assert rounds.begun == [False, True, True] and start.calls == 1
    assert starter.result() is start.started
    assert rounds.body is not None
    rounds.body.join(JOIN_S)


@pytest.mark.parametrize("how", ["start failed", "query ended"])
def test_rounds_end_when_the_start_leaves_no_running_query(how: str) -> None:
    start = _Start(error=RuntimeError("worker late")) if how == "start failed" else _Start()
    start.query.isActive = how != "query ended"
    done = threading.Event()
    done.set()
    _, _, rounds, bridge = _bridge(start, done, body_at=10_000)
    bridge.join(JOIN_S)
    assert not bridge.is_alive(), "no body will come: the rounds end"
    assert rounds.body is None and start.calls == 1


def test_a_stop_during_the_warm_up_runs_no_round_and_starts_nothing() -> None:
    start = _Start()
    never = threading.Event()
    stop, starter, rounds, bridge = _bridge(start, never)
    stop.request("SIGTERM")
    bridge.join(JOIN_S)
    never.set()
    assert not bridge.is_alive()
    assert rounds.begun == [] and not starter.begun and start.calls == 0


def test_rounds_go_on_beside_a_warm_up_that_outlasts_its_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(starting, "WARM_WAIT_MAX_S", 0.3)
    start = _Start()
    stuck = threading.Event()
    _, _, rounds, bridge = _bridge(start, stuck)
    bridge.join(JOIN_S)
    stuck.set()
    assert not bridge.is_alive(), "a warm-up stuck on a service does not hold the rounds"
    assert rounds.begun == [False, True, True] and start.calls == 1
    assert rounds.body is not None
    rounds.body.join(JOIN_S)


def test_no_query_starts_after_a_stop() -> None:
    start = _Start()
    stop = StopSignal()
    starter = QueryStart(start, stop)
    stop.request("SIGTERM")
    starter.begin()
    assert not starter.begun and starter.result() is None and start.calls == 0


def test_a_stop_during_the_first_bridge_round_starts_no_query() -> None:
    start = _Start()
    warmed = threading.Event()
    warmed.set()
    _, starter, rounds, bridge = _bridge(
        start, warmed, body_at=10_000, during_first=lambda stop: stop.request("SIGTERM"))
    bridge.join(JOIN_S)
    assert not bridge.is_alive()
    assert rounds.begun == [False], "a round ran after the stop"
    assert start.calls == 0 and not starter.begun


def test_abandon_stops_the_query_between_batches_so_a_waiting_body_does_not_run() -> None:
    """A run whose start failed aborts (StopSignal.abort): a body that waits for its turn
    returns without running, and the query is stopped only while no body runs."""
    start = _Start()
    stop = StopSignal()
    starter = QueryStart(start, stop)
    starter.begin()
    ran: list[bool] = []

    def body() -> None:
        with stop.batch_body() as may_run:
            ran.append(may_run)

    with stop.batch_body():  # the failing start-up round holds the turn
        waiting = threading.Thread(target=body)
        waiting.start()
        deadline = time.monotonic() + JOIN_S
        while not stop.body_waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.abort("the relay's start failed")
    starter.abandon()
    waiting.join(JOIN_S)
    assert ran == [False], "the waiting body ran rounds after the failure"
    assert start.query.stopped == 1
