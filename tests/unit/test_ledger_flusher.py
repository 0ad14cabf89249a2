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


def _run(ledger: _Ledger, copy_early: bool, seconds: float = 0.4) -> None:
    relay: Any = SimpleNamespace(ledger=ledger)
    copier = LedgerFlusher(relay, interval_s=30.0, copy_early=copy_early)
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
