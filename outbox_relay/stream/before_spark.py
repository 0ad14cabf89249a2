"""The rounds of a run whose Spark session is not up yet: the driver's producer sends
them (outbox_relay.stream.direct_lane) while the session is built beside them
(outbox_relay.launch.session).

A continuous relay asks for its session at once: its query is the frame of its rounds,
and a backlog goes to the executors. A drain asks for it only when it meets a backlog
(a claim cut at the direct lane's limit) or topics it cannot finish alone (in backoff,
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
from collections.abc import Callable

from pyspark.sql import SparkSession

from outbox_relay.errors import first_line
from outbox_relay.launch.session import SparkSource
from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.stop import StopSignal

log = logging.getLogger(__name__)

# How long one call of the rounds lasts at most before the session's readiness is seen.
SLICE_S = 0.5


def rounds_before_spark(processor: BatchProcessor, source: SparkSource, stop: StopSignal, *,
                        available_now: bool, drained: Callable[[], bool],
                        lazy: bool = False,
                        when_up: Callable[[SparkSession], None] | None = None) -> bool:
    """Runs `processor`'s rounds until the session is up and the run wants its query;
    returns True when the run ends without it: a stop came, or (available-now) the
    outbox holds nothing from before the start any more (`drained`). A lazy run hands the
    session to `when_up` once it is up (the ledger's copies may need it meanwhile)."""
    wants = _Wants(source, lazy, when_up)
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
        return _slices(processor, wants, stop, available_now=available_now, drained=drained)
    finally:
        processor.when_backlogged(None)


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
    def wanted(self) -> bool:
        return self._asked or (not self._lazy and self.source.begun)

    def query(self) -> None:
        self._asked = True
        self.source.begin()


def _slices(processor: BatchProcessor, wants: _Wants, stop: StopSignal, *,
            available_now: bool, drained: Callable[[], bool]) -> bool:
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
        if (not available_now and not processor.last_worked
                and stop.wait(processor.poll_wait_s())):
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
