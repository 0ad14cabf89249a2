"""The ledger's copier thread on the driver: staged records to Delta, off the rounds' path."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from outbox_relay.config import LedgerConfig
from outbox_relay.errors import RelayError
from outbox_relay.ledger.delta import Ledger

log = logging.getLogger(__name__)

_FIRST_COPY_POLL_S = 2.0
# Early polls end this long after the start, too: an idle outbox stages nothing, and its
# relay polled every 2 s for ever (five statements each: a relay of a hundred idle
# databases made 250 of them a second for nothing).
_EARLY_FOR_S = 60.0
_DEFER_POLL_S = 1.0
# A copy waits for a drain lane at most this many intervals past its time: under a
# backlog that never ends, staging would otherwise grow and Delta lag without bound.
_MAX_DEFER_INTERVALS = 5
# How long a stop waits for the copy in flight before it cancels the copy's Spark jobs
# (Spark logs a cancelled write as an error). A copy after the JVM's first took 4-8 s
# (12 s under a load of 12 on two cores). The batch in flight and this wait must fit a
# supervisor's grace (Kubernetes: 30 s): with 20 s, a stop under that load took 25 s.
_STOP_WAIT_S = 15.0
_CANCEL_WAIT_S = 5.0


# How often an available-now drain copies while it runs, when the setting is unset.
_DRAIN_COPY_S = {"delta-rs": 2.0, "spark": 600.0}


class DrainCopiers:
    """The ledger copiers of the databases one driver drains (outbox_relay.stream.many).
    Unset, `ledger.drain_flush_interval_s` is a driver's pace, not a database's: each
    copier copies that many times less often, and so the copies together cost what one
    database's do. A copy's cost is mostly its own, not its rows': eight databases
    copying every 2 s took 8.6 CPU-s of delta-rs in a drain of 8 x 100,000 rows
    (docs/performance.md), against 1.9 CPU-s at every 16 s."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0

    def count(self) -> int:
        with self._lock:
            return max(1, self._running)

    def join(self) -> None:
        with self._lock:
            self._running += 1

    def leave(self) -> None:
        with self._lock:
            self._running -= 1


class Clock:
    """Time as the copier reads and waits on it; tests give it a clock of their own."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, done: threading.Event, timeout: float) -> bool:
        """Waits up to `timeout` for `done`; whether it is set."""
        return done.wait(timeout)


class LedgerFlusher:
    """Copies staged ledger records to Delta every interval, off the batches' path."""

    def __init__(self, ledger: Ledger, interval_s: float, copy_early: bool = False,
                 defer: Callable[[], bool] | None = None, clock: Clock | None = None) -> None:
        self._ledger = ledger
        self._interval_s = interval_s
        # While a drain lane works, the cores are the delivery's: a copy (its Spark jobs
        # and Delta's commit, 4-8 s in a young JVM) beside a 500,000-row drain held the
        # other topics' p99 at 1.9 s, against 0.76 s in a drain without one
        # (reports/performance-history.md, W5). What waits is durable in staging and answerable
        # (`ledger show` reads it).
        self._defer = defer or (lambda: False)
        # The first copy in a JVM loads Delta and took 16 s (2.5-3.7 s after it) beside
        # W2's rounds, whose writes then waited up to 1.5 s: a continuous relay makes it
        # as soon as something is staged, early in its life, not at a random later time.
        self._copy_early = copy_early
        self._clock = clock or Clock()
        # A drain's pace follows who copies (for_run), which a copy can change (relay.
        # ledger.delta falls back to Spark); None: the pace is fixed.
        self._pace: Callable[[], tuple[float, Callable[[], bool] | None]] | None = None
        self._copiers: DrainCopiers | None = None
        self._done = threading.Event()
        # Set by a stop that copies nothing more: the copy in flight ends with its batch.
        self._abandon = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-ledger", daemon=True)

    @classmethod
    def for_run(cls, ledger: Ledger, config: LedgerConfig, available_now: bool,
                draining: Callable[[], bool],
                copiers: DrainCopiers | None = None) -> LedgerFlusher:
        """The copier of a run. A copy waits while the drain lane works (`draining`),
        which holds the other topics' latency down, except in an available-now drain that
        delta-rs copies: there a copy takes a fraction of a second of the driver's Python
        beside the rounds, and a drain that copies its rounds as it goes ends with a small
        copy (the final copy of a 1M-row drain took 1.5-3.5 s of its launch to exit).
        `copiers`: the drain's copiers on this driver, which this one joins."""
        if not available_now:
            return cls(ledger, config.flush_interval_s, copy_early=True, defer=draining)

        def pace() -> tuple[float, Callable[[], bool] | None]:
            writer = "spark" if ledger.in_jvm else "delta-rs"
            interval = config.drain_flush_interval_s or (
                _DRAIN_COPY_S[writer] * (copiers.count() if copiers else 1))
            return interval, draining if writer == "spark" else None

        interval, defer = pace()
        flusher = cls(ledger, interval, copy_early=False, defer=defer)
        flusher._pace = pace
        flusher._copiers = copiers
        return flusher

    def start(self) -> None:
        if self._copiers is not None:
            self._copiers.join()
            self._repace()
        self._thread.start()

    def _run(self) -> None:
        # Copies start on a fixed rate: each is due an interval after the last one
        # *started*. Fixed delay (an interval after it ended) drifted by the copy's length
        # against the database's own once-a-minute autovacuum, which makes its own latency
        # ramp, so the minutes of a steady load differed by where the two fell (bench/,
        # SOAK). A copy longer than the interval is followed at once by the next.
        clock = self._clock
        early = self._copy_early
        early_until = clock.now() + _EARLY_FOR_S
        due = clock.now() + self._wait_s(early)
        while not clock.wait(self._done, max(0.0, due - clock.now())):
            if not self._wait_for_the_drain(due):
                return
            started = clock.now()
            # Early polling ends with the first copy, or the first failure: a copy that
            # keeps failing is retried (and logged) once an interval, not every 2 s.
            copied = self.flush_once()
            early = early and copied == 0 and clock.now() < early_until
            due = started + self._wait_s(early)

    def _wait_for_the_drain(self, due: float) -> bool:
        """Waits while `defer` holds, up to its limit past `due`; False once stopped."""
        clock = self._clock
        limit = due + self._interval_s * _MAX_DEFER_INTERVALS
        if self._defer() and clock.now() < limit:
            log.info("ledger copy waits while the drain lane works")
            while self._defer() and clock.now() < limit:
                if clock.wait(self._done, _DEFER_POLL_S):
                    return False
        return True

    def _wait_s(self, early: bool) -> float:
        return min(_FIRST_COPY_POLL_S, self._interval_s) if early else self._interval_s

    def flush_once(self) -> int | None:
        """Copies what is staged; returns the copy batches written, None after a failure."""
        try:
            return self._ledger.flush(stopping=self._abandon.is_set)
        except Exception as exc:  # the next interval retries; nothing staged is lost
            if self._abandon.is_set():
                log.info("ledger copy ended by the stop: %s", str(exc).split("\n", 1)[0])
                return None
            log.warning("ledger copy failed, will retry: %s", exc)
            return None
        finally:
            self._repace()

    def _repace(self) -> None:
        if self._pace is not None:
            interval, defer = self._pace()
            self._interval_s, self._defer = interval, defer or (lambda: False)

    def stop(self, copy_now: bool = True) -> None:
        """Stop copying; with copy_now, wait for the copy in flight and copy the rest.

        After a stop signal (copy_now False) the copy in flight ends its batch, for up to
        _STOP_WAIT_S, and is then cancelled: either way its Spark jobs end before the
        Spark context stops, which would fail them with errors in the log. What it leaves
        stays in PostgreSQL for the next run, as one line says.
        """
        if not copy_now:
            self._abandon.set()
        self._done.set()
        if self._copiers is not None and self._thread.ident is not None:
            self._copiers.leave()
            self._copiers = None
        if copy_now:
            self._join(None)
            log.debug("ledger: the final copy starts")
            self.flush_once()
            return
        ending = self._thread.is_alive()
        if ending:
            self._ledger.end_copies(cancel=False)
        if not self._join(_STOP_WAIT_S):
            log.warning("ledger: the copy in flight did not end within %.0f s of the stop; "
                        "cancelling it (Spark reports its write as an aborted job)",
                        _STOP_WAIT_S)
            self._ledger.end_copies(cancel=True)
            self._join(_CANCEL_WAIT_S)
        if ending:
            self._ledger.resume()
        self._say_what_stays()

    def _join(self, timeout: float | None) -> bool:
        """Whether the copier thread is over (or never started) within `timeout`."""
        if self._thread.ident is None or self._thread is threading.current_thread():
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _say_what_stays(self) -> None:
        try:
            records, messages = self._ledger.staged_count()
        except RelayError as exc:
            log.warning("ledger: stopped; what stays staged is unknown: %s", exc)
            return
        log.info("ledger: %d staged records (%d messages) stay in PostgreSQL; the next "
                 "copy takes them", records, messages)
