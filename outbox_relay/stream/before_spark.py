"""The rounds of a run whose Spark session is not up yet: the driver's producer sends
them (outbox_relay.stream.direct_lane) while the session is built beside them
(outbox_relay.launch.session).

A continuous relay asks for its session at once: its query is the frame of its rounds,
and a backlog goes to the executors. A drain asks for it only when it meets a backlog
for the executors (a claim cut at the direct lane's limit, unless relay.backlog_lane
gives backlogs to the driver's producer too) or topics it cannot finish alone (in backoff,
locked elsewhere: the query's deadline handles those); a drain these rounds finish
never builds a session. Each call of the rounds is a short slice, so that the session's
readiness is seen within one.

A database of a relay of several (outbox_relay.stream.many) is `lazy`: its rounds stay
here, on the driver's producer, until it needs the query itself (a backlog, or work its
rounds cannot finish alone), even once the session is up. A streaming query and its
source's Python worker cost each database about 100 MB and a share of a core, which
a hundred idle databases must not pay; the session they share is built at the start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pyspark.sql import SparkSession

from outbox_relay.control.idle_watch import IdlePoll, IdleWatch
from outbox_relay.errors import RelayError, first_line
from outbox_relay.launch.session import SparkSource
from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.stop import StopSignal

log = logging.getLogger(__name__)

# How long one call of the rounds lasts at most before the session's readiness is seen.
SLICE_S = 0.5
# How long a database stays parked in the idle watch at most before a round of its own.
PARK_S = 30.0


def rounds_before_spark(processor: BatchProcessor, source: SparkSource, stop: StopSignal, *,
                        available_now: bool, drained: Callable[[], bool],
                        lazy: bool = False,
                        when_up: Callable[[SparkSession], None] | None = None,
                        watch: IdleWatch | None = None) -> bool:
    """Runs `processor`'s rounds until the session is up and the run wants its query;
    returns True when the run ends without it: a stop came, or (available-now) the
    outbox holds nothing from before the start any more (`drained`). A lazy run hands the
    session to `when_up` once it is up (the ledger's copies may need it meanwhile), and
    parks in `watch`, when given, while it is idle."""
    wants = _Wants(source, lazy, when_up)
    parking = _Parking(watch, processor, stop) if watch is not None and lazy else None
    if not available_now and not lazy:
        wants.query()

    def backlog() -> None:
        # A claim cut at the direct lane's limit: the session is built beside that
        # round's writes, not after them.
        if not wants.wanted:
            log.info("a backlog: Spark's executors take it once the session is up")
        wants.query()

    processor.when_backlogged(backlog)
    try:
        return _slices(processor, wants, stop, available_now=available_now, drained=drained,
                       parking=parking)
    finally:
        processor.when_backlogged(None)
        if parking is not None:
            parking.close()


class _Wants:
    """Whether this run wants its query; wanting it begins the session's build. A run
    that is not lazy wants it as soon as anyone began the session (its own source)."""

    def __init__(self, source: SparkSource, lazy: bool,
                 when_up: Callable[[SparkSession], None] | None) -> None:
        self.source = source
        self._lazy = lazy
        self._asked = False
        self._when_up = when_up

    def see_if_up(self) -> None:
        """Hands a session that is now up to `when_up`, once; one whose build failed is
        the query's to report, if this run ever wants one."""
        if self._when_up is None or not self.source.ready:
            return
        when_up, self._when_up = self._when_up, None
        try:
            when_up(self.source.result())
        except Exception as exc:
            log.warning("the Spark session is not up: %s", first_line(exc))

    @property
    def settled(self) -> bool:
        """Whether nothing is left to see until a round finds work: no query wanted, and
        the session handed over (or nobody to hand it to)."""
        return not self.wanted and self._when_up is None

    @property
    def wanted(self) -> bool:
        return self._asked or (not self._lazy and self.source.begun)

    def query(self) -> None:
        self._asked = True
        self.source.begin()


class _Parking:
    """A lazy, continuous database's parks in the idle watch: while its rounds find no work
    and it waits for nothing else (`_Wants.settled`), the watch polls its outbox for it.
    A database the watch cannot connect to polls on its own for a park's length."""

    def __init__(self, watch: IdleWatch, processor: BatchProcessor, stop: StopSignal) -> None:
        self._watch = watch
        self._processor = processor
        self._stop = stop
        self._spot: IdlePoll | None = None
        self._not_before = 0.0

    def park(self) -> bool:
        """Parks until work, the stop, a park's length or a failure; False (without
        parking) when it cannot: the caller then waits a poll itself."""
        if not (self._processor.idle and self._watch.usable
                and time.monotonic() >= self._not_before):
            return False
        if self._spot is None or not self._spot.connected:
            self.close()
            spot = self._processor.idle_poll()
            try:
                spot.connect()
            except RelayError as exc:
                log.debug("not parked, polling on its own for %.0f s: %s", PARK_S, exc)
                self._not_before = time.monotonic() + PARK_S
                return False
            self._spot = spot
        why = self._watch.park(self._spot, lambda: self._stop.requested, PARK_S)
        log.debug("unparked: %s", why)
        return self._watch.usable

    def close(self) -> None:
        if self._spot is not None:
            self._spot.close()
            self._spot = None


def _pause(processor: BatchProcessor, wants: _Wants, stop: StopSignal,
           parking: _Parking | None) -> bool:
    """After a slice without work: parked in the idle watch when it may be, else a poll's
    wait. Returns whether the stop came."""
    if parking is not None and wants.settled and parking.park():
        return stop.requested
    return stop.wait(processor.poll_wait_s())


def _slices(processor: BatchProcessor, wants: _Wants, stop: StopSignal, *,
            available_now: bool, drained: Callable[[], bool],
            parking: _Parking | None = None) -> bool:
    while not stop.requested:
        batches = processor.stats.batches
        processor.run_rounds("direct round", SLICE_S)
        processor.bound_every_round()
        if processor.failure is not None:
            raise processor.failure
        if stop.requested:
            break
        # A slice ends with a round at its deadline: after one that found no work, the
        # next slice's first round waits a poll, as the rounds within a slice do (else
        # each slice polled once more: 6 polls a second where the idle interval makes
        # 4, in each database of a relay of several).
        if not available_now and not processor.last_worked and _pause(
                processor, wants, stop, parking):
            break
        if available_now and not wants.wanted and processor.stats.batches == batches:
            # A round found nothing to do (a backlog wanted the query already).
            if drained():
                return True
            wants.query()
        wants.see_if_up()
        if wants.wanted and wants.source.ready:
            return False
    return True
