"""The copier's schedule (early polls, fixed rate, the drain lane's wait) on a clock of the
test's own, and its stop, which ends the copy in flight before the Spark context stops."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

import pytest

from outbox_relay.config import LedgerConfig
from outbox_relay.ledger import flusher
from outbox_relay.ledger.delta import Ledger
from outbox_relay.ledger.flusher import Clock, LedgerFlusher


class _Clock(Clock):
    """Time moves only when the copier waits, or a copy takes time; `horizon` stops it."""

    def __init__(self, horizon: float) -> None:
        self.t = 0.0
        self.horizon = horizon

    def now(self) -> float:
        return self.t

    def wait(self, done: threading.Event, timeout: float) -> bool:
        if not done.is_set() and self.t + timeout > self.horizon:
            done.set()  # the stop, at the horizon
            return True
        self.t += timeout  # a wait that ignored its stop still takes its time
        return done.is_set()


class _Ledger:
    """Results in order (the last repeats); each copy takes `copy_s` of the clock."""

    def __init__(self, clock: _Clock, results: list[int | Exception],
                 copy_s: float = 0.0) -> None:
        self.clock = clock
        self.results = results
        self.copy_s = copy_s
        self.starts: list[float] = []

    def flush(self, stopping: Callable[[], bool] = lambda: False) -> int:
        self.starts.append(self.clock.t)
        self.clock.t += self.copy_s
        result = self.results[min(len(self.starts), len(self.results)) - 1]
        if isinstance(result, Exception):
            raise result
        return result


def _copies(results: list[int | Exception], horizon: float, interval_s: float,
            copy_early: bool = False, copy_s: float = 0.0,
            defer: Callable[[float], bool] | None = None) -> list[float]:
    """When each copy started, from the copier's start until `horizon`."""
    clock = _Clock(horizon)
    ledger: Any = _Ledger(clock, results, copy_s)
    lane = None if defer is None else (lambda: defer(clock.t))
    LedgerFlusher(ledger, interval_s=interval_s, copy_early=copy_early, defer=lane,
                  clock=clock)._run()
    return ledger.starts


def test_early_polls_stop_at_the_first_copy() -> None:
    # Three empty polls 2 s apart, the copy, then the 30 s interval.
    assert _copies([0, 0, 0, 1, 1], horizon=100, interval_s=30, copy_early=True) == [
        2, 4, 6, 8, 38, 68, 98]


def test_early_polls_end_a_minute_after_the_start_when_nothing_is_staged() -> None:
    # An idle outbox: 2 s polls for the first minute, then the interval's.
    assert _copies([0], horizon=150, interval_s=30, copy_early=True) == [
        *range(2, 62, 2), 90, 120, 150]


def test_early_polls_stop_at_the_first_failure() -> None:
    assert _copies([RuntimeError("Delta path unwritable"), 1], horizon=100, interval_s=30,
                   copy_early=True) == [2, 32, 62, 92]


def test_without_early_copies_the_first_waits_an_interval() -> None:
    assert _copies([1], horizon=29.9, interval_s=30) == []
    assert _copies([1], horizon=30, interval_s=30) == [30]


# A continuous relay copied once, at its start, and never again (a 20-minute soak left
# its Delta ledger at that first copy): the interval's copies must go on whatever the
# early polls did.
@pytest.mark.parametrize(("copy_early", "results", "starts"), [
    (True, [0, 1, 1], [2, 4, 14, 24, 34, 44]),  # after the first copy
    (True, [RuntimeError("Delta path unwritable"), 1], [2, 12, 22, 32, 42]),  # after a failure
    (False, [1, 0, 1], [10, 20, 30, 40]),  # an available-now drain's interval copies
])
def test_copies_go_on_once_an_interval(copy_early: bool, results: list[int | Exception],
                                       starts: list[float]) -> None:
    assert _copies(results, horizon=45, interval_s=10, copy_early=copy_early) == starts


def test_copies_start_an_interval_apart_however_long_each_takes() -> None:
    """Fixed rate: copies of 1 s every 2 s start 2 s apart, where a fixed delay would
    start them 3 s apart."""
    assert _copies([1], horizon=10, interval_s=2, copy_s=1) == [2, 4, 6, 8, 10]


def test_a_copy_longer_than_the_interval_is_followed_at_once() -> None:
    assert _copies([1], horizon=10, interval_s=1, copy_s=3) == [1, 4, 7, 10]


@pytest.fixture(autouse=True)
def _one_second_defer_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flusher, "_DEFER_POLL_S", 1.0)
    monkeypatch.setattr(flusher, "_MAX_DEFER_INTERVALS", 5)


def test_a_copy_waits_while_the_drain_lane_works() -> None:
    # Due at 10 s; the lane works until 15 s: the copy follows it at once, then one an
    # interval after that copy.
    assert _copies([1], horizon=40, interval_s=10, defer=lambda t: t < 15) == [15, 25, 35]


def test_a_copy_waits_for_the_drain_lane_only_so_long() -> None:
    # A lane that never stops: each copy is due an interval after the last one and
    # waits 5 intervals more, so one comes every 6 intervals.
    assert _copies([1], horizon=200, interval_s=10, defer=lambda t: True) == [60, 120, 180]


def test_a_stop_ends_the_wait_and_copies_what_is_staged() -> None:
    clock = _Clock(horizon=25)  # the stop comes at 25 s, while the copy due at 10 s waits
    ledger: Any = _Ledger(clock, [1])
    copier = LedgerFlusher(ledger, interval_s=10, defer=lambda: True, clock=clock)
    copier._run()
    assert ledger.starts == []  # the wait ended with the stop, not with its limit (60 s)
    copier.stop(copy_now=True)
    assert ledger.starts == [25]  # the stop's own copy


class _CopyInFlight:
    """A real copier thread's copy that goes on until the copier was told to stop."""

    def __init__(self, staged: tuple[int, int] = (3, 120)) -> None:
        self.entered = threading.Event()
        self.told_to_stop = threading.Event()
        self.ended = threading.Event()
        self.staged = staged
        self.cancelled = self.compaction_skipped = False
        self.resumed_after_end: bool | None = None  # None: never resumed
        self.stopping_seen: list[bool] = []

    def flush(self, stopping: Callable[[], bool] = lambda: False) -> int:
        self.entered.set()
        self.told_to_stop.wait(30)
        self.stopping_seen.append(stopping())
        self.ended.set()
        return 1

    def end_copies(self, cancel: bool) -> None:
        self.compaction_skipped = True
        self.cancelled = self.cancelled or cancel

    def resume(self) -> None:
        self.resumed_after_end = self.ended.is_set()

    def staged_count(self) -> tuple[int, int]:
        return self.staged


def test_a_stop_signal_waits_for_the_copy_in_flight_and_says_what_stays(
        caplog: pytest.LogCaptureFixture) -> None:
    """A stop signal (copy_now False) returns only once the copy's batch ended, so its
    Spark jobs never meet the Spark context's stop, and says in one line what stays."""
    ledger: Any = _CopyInFlight()
    copier = LedgerFlusher(ledger, interval_s=0.01)
    copier.start()
    assert ledger.entered.wait(30)
    # The copier's stop is what lets this copy end: it sets the flag the copy reads.
    threading.Thread(target=lambda: ledger.told_to_stop.set() if copier._abandon.wait(30)
                     else None, daemon=True).start()
    caplog.set_level("INFO", logger=flusher.__name__)
    copier.stop(copy_now=False)
    assert ledger.ended.is_set(), "the stop returned while the copy was in flight"
    assert ledger.stopping_seen == [True] and ledger.compaction_skipped
    assert ledger.resumed_after_end, "compaction is the session's again once the copy ended"
    assert not ledger.cancelled
    said = [r.getMessage() for r in caplog.records if "stay in PostgreSQL" in r.getMessage()]
    assert said == ["ledger: 3 staged records (120 messages) stay in PostgreSQL; the next "
                    "copy takes them"]


def test_a_copy_that_outlasts_the_stop_s_wait_is_cancelled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flusher, "_STOP_WAIT_S", 0.0)
    ledger: Any = _CopyInFlight()

    def end_copies(cancel: bool) -> None:
        if cancel:
            ledger.cancelled = True
            ledger.told_to_stop.set()  # cancelling the copy's jobs ends the copy

    ledger.end_copies = end_copies  # type: ignore[method-assign]
    copier = LedgerFlusher(ledger, interval_s=0.01)
    copier.start()
    assert ledger.entered.wait(30)
    copier.stop(copy_now=False)
    assert ledger.cancelled and ledger.ended.is_set()


class _Writer:
    """What LedgerFlusher.for_run reads of a Ledger: who writes its copies."""

    def __init__(self, in_jvm: bool) -> None:
        self.in_jvm = in_jvm


def _for_run(in_jvm: bool, available_now: bool, **ledger: Any) -> LedgerFlusher:
    return LedgerFlusher.for_run(cast(Ledger, _Writer(in_jvm)), LedgerConfig(**ledger),
                                 available_now, lambda: True)


def test_a_drain_that_delta_rs_copies_copies_every_2_s_beside_the_drain_lane() -> None:
    flusher = _for_run(in_jvm=False, available_now=True)
    assert flusher._interval_s == 2.0
    assert not flusher._defer(), "a copy of a drain's rounds does not wait for the lane"


def test_a_drain_that_spark_copies_copies_at_its_end_and_waits_for_the_drain_lane() -> None:
    flusher = _for_run(in_jvm=True, available_now=True)
    assert flusher._interval_s == 600.0
    assert flusher._defer()


def test_a_continuous_relay_copies_on_its_interval_and_waits_for_the_drain_lane() -> None:
    for in_jvm in (True, False):
        flusher = _for_run(in_jvm=in_jvm, available_now=False, flush_interval_s=30)
        assert flusher._interval_s == 30
        assert flusher._defer()


def test_a_drain_interval_set_in_the_profile_is_kept() -> None:
    assert _for_run(in_jvm=False, available_now=True, drain_flush_interval_s=60)._interval_s == 60


class _FallsBack(_Writer):
    """A ledger whose first copy hands the copies from delta-rs to Spark (its fallback)."""

    def flush(self, stopping: Callable[[], bool] = lambda: False) -> int:
        self.in_jvm = True
        return 1


def test_a_drain_whose_copies_fall_back_to_spark_is_paced_as_a_spark_drain() -> None:
    """Spark's copy jobs every 2 s beside the drain, never waiting for its lane, would take
    the cores the rounds need, as if the profile had asked for delta-rs's pace."""
    ledger = _FallsBack(in_jvm=False)
    copier = LedgerFlusher.for_run(cast(Ledger, ledger), LedgerConfig(), True, lambda: True)
    assert copier._interval_s == 2.0 and not copier._defer()
    assert copier.flush_once() == 1
    assert copier._interval_s == 600.0
    assert copier._defer()


class _Idle(_Writer):
    """A delta-rs ledger with nothing staged, for copiers that start and stop."""

    def flush(self, stopping: Callable[[], bool] = lambda: False) -> int:
        return 0

    def staged_count(self) -> tuple[int, int]:
        return 0, 0

    def end_copies(self, cancel: bool) -> None:
        pass

    def resume(self) -> None:
        pass


def test_the_drains_of_one_driver_share_the_copy_pace_and_a_profile_s_interval_is_kept() -> None:
    """Eight databases drained by one relay copied as often as eight relays would, eight
    times a drain's copy cost in the one interpreter (docs/performance.md, MANY)."""
    copiers = flusher.DrainCopiers()
    runs = [LedgerFlusher.for_run(cast(Ledger, _Idle(in_jvm=False)), LedgerConfig(), True,
                                  lambda: True, copiers) for _ in range(3)]
    assert [r._interval_s for r in runs] == [2.0] * 3, "one copier alone: a drain's pace"
    for run in runs:
        run.start()
    assert runs[0]._interval_s == 2.0 and runs[2]._interval_s == 6.0
    assert copiers.count() == 3
    set_in_profile = LedgerFlusher.for_run(
        cast(Ledger, _Idle(in_jvm=False)), LedgerConfig(drain_flush_interval_s=1.5), True,
        lambda: True, copiers)
    set_in_profile.start()
    assert set_in_profile._interval_s == 1.5 and copiers.count() == 4

    runs[0].stop(copy_now=False)
    set_in_profile.stop(copy_now=True)
    runs[0].stop(copy_now=False)  # a second stop leaves no second time
    assert copiers.count() == 2
    assert runs[1].flush_once() == 0
    assert runs[1]._interval_s == 4.0, "re-paced after its copy: two copiers left"
    for run in runs[1:]:
        run.stop(copy_now=False)
    assert copiers.count() == 1, "never below one: a pace is one copier's at least"
