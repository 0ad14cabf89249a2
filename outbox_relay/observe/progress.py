"""The progress line of an available-now drain on a terminal: delivered, left, rate.

Redrawn in place (carriage return), at most a few times a second. The runner shows it
only when stderr is a terminal and logs are not JSON: a log file or a scheduler's
captured output gets no carriage returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TextIO

_MIN_INTERVAL_S = 0.25


class Counts(Protocol):
    """What a drain has done so far (outbox_relay.stream.stats.RelayStats)."""

    @property
    def published(self) -> dict[str, int]: ...
    @property
    def compacted(self) -> dict[str, int]: ...
    @property
    def parked(self) -> dict[str, int]: ...


def format_progress(delivered: int, left: int, rate: float) -> str:
    """One line: `12,345 delivered, 987,655 left, 8,765 msg/s`."""
    return f"outbox-relay: {delivered:,} delivered, {max(left, 0):,} left, {rate:,.0f} msg/s"


class Progress:
    """`waiting` is what the drain must move (rows up to its bound at the start); a row
    leaves it published, compacted or parked. `left` subtracts from that count instead
    of counting the outbox again: a count of a million rows per redraw is not free."""

    def __init__(self, stream: TextIO, waiting: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._waiting = waiting
        self._clock = clock
        self._started = clock()
        self._drawn_at: float | None = None
        self._updated_at = self._started
        self._width = 0

    def line(self, counts: Counts, at: float) -> str:
        """The figures at time `at`: the rate is what was delivered since the start."""
        delivered = sum(counts.published.values())
        gone = delivered + sum(counts.compacted.values()) + sum(counts.parked.values())
        elapsed = max(at - self._started, 1e-9)
        return format_progress(delivered, self._waiting - gone, delivered / elapsed)

    def update(self, counts: Counts) -> None:
        """After each round: redrawn unless the last drawing is under 0.25 s old."""
        now = self._updated_at = self._clock()
        if self._drawn_at is not None and now - self._drawn_at < _MIN_INTERVAL_S:
            return
        self._draw(counts, now)

    def _draw(self, counts: Counts, at: float) -> None:
        self._drawn_at = at
        text = self.line(counts, at)
        # Pad over a longer line drawn before; \r returns to the line's start.
        self._stream.write("\r" + text.ljust(self._width))
        self._stream.flush()
        self._width = len(text)

    def close(self, counts: Counts) -> None:
        """Draw the final figures and end the line, so what follows starts on a new one."""
        if self._drawn_at is None:
            return
        # As of the last round: the drain's end (the ledger's last copy) delivers nothing.
        self._draw(counts, self._updated_at)
        self._stream.write("\n")
        self._stream.flush()
