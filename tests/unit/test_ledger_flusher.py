"""The copier's early polling: until a continuous relay's first copy, then once an interval."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from relay.ledger import flusher
from relay.ledger.flusher import LedgerFlusher


class _Ledger:
    def __init__(self, results: list[int | Exception]) -> None:
        self.results = results
        self.calls = 0

    def flush(self) -> int:
        self.calls += 1
        result = self.results[min(self.calls, len(self.results)) - 1]
        if isinstance(result, Exception):
            raise result
        return result


def _run(ledger: _Ledger, copy_early: bool, seconds: float = 0.4,
         interval_s: float = 30.0) -> None:
    relay: Any = SimpleNamespace(ledger=ledger)
    copier = LedgerFlusher(relay, interval_s=interval_s, copy_early=copy_early)
    copier.start()
    time.sleep(seconds)
    copier.stop(copy_now=False)


@pytest.fixture(autouse=True)
def _fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flusher, "_FIRST_COPY_POLL_S", 0.02)


def test_early_polls_stop_at_the_first_copy() -> None:
    ledger = _Ledger([0, 0, 0, 1, 1])
    _run(ledger, copy_early=True)
    assert ledger.calls == 4  # three empty polls, the copy, then a 30 s interval


def test_early_polls_stop_at_the_first_failure() -> None:
    ledger = _Ledger([RuntimeError("Delta path unwritable")])
    _run(ledger, copy_early=True)
    assert ledger.calls == 1


def test_without_early_copies_the_first_waits_an_interval() -> None:
    ledger = _Ledger([1])
    _run(ledger, copy_early=False)
    assert ledger.calls == 0


# A continuous relay copied once, at its start, and never again (a 20-minute soak left
# its Delta ledger at that first copy): the interval's copies must go on whatever the
# early polls did.
@pytest.mark.parametrize(("copy_early", "results"), [
    (True, [0, 1, 1]),  # after the first copy
    (True, [RuntimeError("Delta path unwritable"), 1]),  # after a failed first copy
    (False, [1, 0, 1]),  # an available-now drain's interval copies
])
def test_copies_go_on_once_an_interval(copy_early: bool, results: list[int | Exception]) -> None:
    ledger = _Ledger(results)
    _run(ledger, copy_early=copy_early, seconds=0.5, interval_s=0.1)
    assert 4 <= ledger.calls <= 7, ledger.calls


class _SlowLedger(_Ledger):
    """A copy that takes `copy_s`, recording when each one started."""

    def __init__(self, copy_s: float) -> None:
        super().__init__([1])
        self.copy_s = copy_s
        self.starts: list[float] = []

    def flush(self) -> int:
        self.starts.append(time.monotonic())
        time.sleep(self.copy_s)
        return super().flush()


def test_copies_start_an_interval_apart_however_long_each_takes() -> None:
    """Fixed rate: with copies of 0.1 s every 0.2 s they start 0.2 s apart, where a fixed
    delay would start them 0.3 s apart."""
    ledger = _SlowLedger(copy_s=0.1)
    _run(ledger, copy_early=False, seconds=1.5, interval_s=0.2)
    gaps = sorted(b - a for a, b in zip(ledger.starts, ledger.starts[1:], strict=False))
    assert len(gaps) >= 4, ledger.starts
    assert gaps[len(gaps) // 2] < 0.25, gaps


def test_a_copy_longer_than_the_interval_is_followed_at_once() -> None:
    ledger = _SlowLedger(copy_s=0.15)
    _run(ledger, copy_early=False, seconds=1.0, interval_s=0.05)
    gaps = [b - a for a, b in zip(ledger.starts, ledger.starts[1:], strict=False)]
    assert gaps and max(gaps) < 0.25, gaps  # no interval's wait after an overrun copy


class _Drain:
    """The drain lane's `defer`: works until `until` (monotonic), or for good."""

    def __init__(self, seconds: float | None) -> None:
        self.until = None if seconds is None else time.monotonic() + seconds

    def __call__(self) -> bool:
        return self.until is None or time.monotonic() < self.until


def _deferred(ledger: _Ledger, defer: _Drain, seconds: float, interval_s: float = 0.05,
              copy_now: bool = False) -> LedgerFlusher:
    relay: Any = SimpleNamespace(ledger=ledger)
    copier = LedgerFlusher(relay, interval_s=interval_s, copy_early=False, defer=defer)
    copier.start()
    time.sleep(seconds)
    copier.stop(copy_now=copy_now)
    return copier


@pytest.fixture
def _fast_defer_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flusher, "_DEFER_POLL_S", 0.01)


@pytest.mark.usefixtures("_fast_defer_polls")
def test_a_copy_waits_while_the_drain_lane_works() -> None:
    ledger = _SlowLedger(copy_s=0.0)
    started = time.monotonic()
    _deferred(ledger, _Drain(0.15), seconds=0.3, interval_s=0.05)
    # Due at 0.05 s, with a limit 0.25 s past that: the lane's 0.15 s ends first, and
    # the copy follows it at once, then the next an interval later.
    assert ledger.starts, "no copy after the drain lane stopped"
    first = ledger.starts[0] - started
    assert 0.15 <= first < 0.25, first
    assert len(ledger.starts) >= 2, ledger.starts


@pytest.mark.usefixtures("_fast_defer_polls")
def test_a_copy_waits_for_the_drain_lane_only_so_long() -> None:
    ledger = _SlowLedger(copy_s=0.0)
    started = time.monotonic()
    _deferred(ledger, _Drain(None), seconds=0.6, interval_s=0.05)
    # Due at 0.05 s, waited up to 5 intervals more: the first copy near 0.3 s, then one
    # every 0.3 s while the lane never stops.
    assert ledger.starts, "a lane that never stops held every copy back"
    first = ledger.starts[0] - started
    assert 0.28 <= first < 0.45, first


@pytest.mark.usefixtures("_fast_defer_polls")
def test_a_stop_ends_the_wait_and_copies_what_is_staged() -> None:
    ledger = _SlowLedger(copy_s=0.0)
    started = time.monotonic()
    # Due at 0.05 s and waiting (the limit is at 0.3 s) when the stop comes at 0.15 s.
    copier = _deferred(ledger, _Drain(None), seconds=0.15, interval_s=0.05, copy_now=True)
    assert not copier._thread.is_alive()
    assert len(ledger.starts) == 1  # the stop's own copy, not a waited-out one
    assert ledger.starts[0] - started >= 0.15
    assert time.monotonic() - started < 1.0
