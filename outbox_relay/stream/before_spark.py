"""The rounds of a run whose Spark session is not up yet: the driver's producer sends
them (outbox_relay.stream.direct_lane) while the session is built beside them
(outbox_relay.launch.session).

A continuous relay asks for its session at once: its query is the frame of its rounds,
and a backlog goes to the executors. A drain asks for it only when it meets a backlog
(a claim cut at the direct lane's limit) or topics it cannot finish alone (in backoff,
locked elsewhere: the query's deadline handles those); a drain these rounds finish
never builds a session. Each call of the rounds is a short slice, so that the session's
readiness is seen within one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from outbox_relay.launch.session import SparkSource
from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.stop import StopSignal

log = logging.getLogger(__name__)

# How long one call of the rounds lasts at most before the session's readiness is seen.
SLICE_S = 0.5


def rounds_before_spark(processor: BatchProcessor, source: SparkSource, stop: StopSignal, *,
                        available_now: bool, drained: Callable[[], bool]) -> bool:
    """Runs `processor`'s rounds until the session is up; returns True when the run ends
    without it: a stop came, or (available-now) the outbox holds nothing from before the
    start any more (`drained`)."""
    if not available_now:
        source.begin()

    def backlog() -> None:
        # A claim cut at the direct lane's limit: the session is built beside that
        # round's writes, not after them.
        if not source.begun:
            log.info("a backlog: Spark's executors take it once the session is up")
        source.begin()

    processor.when_backlogged(backlog)
    try:
        return _slices(processor, source, stop, available_now=available_now, drained=drained)
    finally:
        processor.when_backlogged(None)


def _slices(processor: BatchProcessor, source: SparkSource, stop: StopSignal, *,
            available_now: bool, drained: Callable[[], bool]) -> bool:
    while not stop.requested:
        batches = processor.stats.batches
        processor.run_rounds("direct round", SLICE_S)
        processor.bound_every_round()
        if processor.failure is not None:
            raise processor.failure
        if stop.requested:
            break
        if available_now and not source.begun and processor.stats.batches == batches:
            # A round found nothing to do (a backlog began the session already).
            if drained():
                return True
            source.begin()
        if source.ready:
            return False
    return True
