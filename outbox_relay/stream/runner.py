"""Runs the relay: continuous or available-now, with graceful stops and exit codes.

A relay without a Spark session yet sends by the driver's producer while the session is
built beside it (outbox_relay.stream.before_spark); once it is up, the streaming query is
the frame of the rounds (outbox_relay.stream.query). A drain those first rounds finish
never builds one, unless Spark writes its ledger (the end's copy needs it).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TextIO

from outbox_relay.control.idle_watch import IdleWatch
from outbox_relay.control.pending import (
    TopicFilter,
    TopicState,
    max_id,
    pending_topics,
    waiting_up_to,
)
from outbox_relay.errors import RelayError, exit_code_for, first_line
from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.session import SparkSource
from outbox_relay.ledger.flusher import DrainCopiers, LedgerFlusher
from outbox_relay.observe.progress import Progress
from outbox_relay.observe.serve import exported
from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.before_spark import rounds_before_spark
from outbox_relay.stream.budget import TimeBudget, describe
from outbox_relay.stream.query import run_with_query
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal, forward_jvm_signals
from outbox_relay.wiring import Relay, batch_processor

log = logging.getLogger(__name__)

# Names the tests and callers already use; the numbers live in outbox_relay.exit_codes only.
EXIT_OK = ExitCode.OK
EXIT_LEFT_OVER = ExitCode.LEFT_OVER
EXIT_INTERRUPTED = ExitCode.INTERRUPTED
EXIT_FAILED = ExitCode.QUERY_FAILED

_REMAINING_ATTEMPTS = 3
_REMAINING_PAUSE_S = 1.0


@dataclass
class RunResult:
    exit_code: int
    stats: RelayStats
    seconds: float
    left_over: list[TopicState]
    # Set when PostgreSQL could not say what is left at the end of a drain.
    unverified: str | None = None
    # Set when the drain's time budget ended it with rows left: what ran out.
    out_of_time: str | None = None


def left_over(relay: Relay, bound: int | None = None) -> list[TopicState]:
    settings = relay.config.relay
    topic_filter = TopicFilter(settings.include_topics, settings.exclude_topics)
    return pending_topics(relay.db, settings.lock_timeout_s, topic_filter, bound)


def run(relay: Relay, available_now: bool, stop: StopSignal | None = None,
        progress: TextIO | None = None, source: SparkSource | None = None,
        started: float | None = None) -> RunResult:
    """Runs the relay until it drained (available-now) or is stopped. Its metrics are
    served meanwhile, or pushed at the end (outbox_relay.observe.serve); `progress`, for an
    available-now run, receives the progress line. A relay without a Spark session
    sends by the driver's producer until `source` has built one
    (outbox_relay.stream.before_spark). An available-now run's time budget counts from
    `started` (time.monotonic(); default: now)."""
    with exported(relay.config.metrics, relay.metrics.registry, available_now,
                  relay.config.relay.source_name):
        return run_relay(relay, available_now, stop or StopSignal(), progress, source,
                         started)


def run_relay(relay: Relay, available_now: bool, stop: StopSignal, progress: TextIO | None,
              source: SparkSource | None, started: float | None, lazy: bool = False,
              watch: IdleWatch | None = None,
              copiers: DrainCopiers | None = None) -> RunResult:
    """run() without exporting the metrics: a relay of several databases exports all of
    theirs at once (outbox_relay.stream.many), starts a database's query only when it
    needs one (`lazy`: outbox_relay.stream.before_spark), parks it in `watch` while
    it is idle, and paces a drain's ledger copies with the others' (`copiers`)."""
    if relay.spark is None and source is None:
        raise ValueError("a relay without a Spark session needs a source for one")
    return _run(relay, available_now, stop, progress, source, started, lazy, watch, copiers)


def _run(relay: Relay, available_now: bool, stop: StopSignal, progress: TextIO | None,
         source: SparkSource | None, launched: float | None, lazy: bool,
         watch: IdleWatch | None, copiers: DrainCopiers | None) -> RunResult:
    started = time.monotonic()
    bound = max_id(relay.db) if available_now else None
    stats = RelayStats()
    line = _progress_line(relay, progress, bound)
    # The processor whose lanes say whether a drain goes on (the ledger copier asks).
    current: list[BatchProcessor] = []
    flusher = LedgerFlusher.for_run(relay.ledger, relay.config.ledger, available_now,
                                    lambda: bool(current) and current[-1].draining(),
                                    copiers)
    flusher.start()
    budget = TimeBudget(relay.config.relay.available_now_budget_s if available_now else None,
                        started if launched is None else launched, stop)
    failed = False
    error: BaseException | None = None
    try:
        processor = batch_processor(relay, stop, bound=bound, continuous=not available_now,
                                    stats=stats)
        processor.progress = line
        current.append(processor)
        drained = lambda: bound is not None and _drained(relay, bound)  # noqa: E731
        done = False
        if relay.spark is None:
            assert source is not None
            try:
                done = rounds_before_spark(processor, source, stop,
                                           available_now=available_now, drained=drained,
                                           lazy=lazy,
                                           when_up=relay.ledger.attach if lazy else None,
                                           watch=watch)
            finally:
                processor.close()
            if not done:
                relay.attach_spark(source.result())
                processor = batch_processor(relay, stop, bound=bound,
                                            continuous=not available_now, stats=stats)
                processor.progress = line
                current.append(processor)
        if not done:
            assert relay.spark is not None
            forward_jvm_signals(relay.spark, stop)
            try:
                failed = run_with_query(relay.spark, relay.config, processor, available_now,
                                        bound, stop, drained)
            finally:
                processor.close()
    except Exception as exc:  # before Spark: a round's own failure, or the session's
        log.error("the run failed: %s", first_line(exc))
        failed, error = True, exc
    finally:
        budget.cancel()
        failure = (current[-1].failure if current else None) or error
        # A drain its budget ended copies as a drain's end does; a stop signal does not.
        copy_now = not stop.requested or (stop.ran_out and failure is None)
        if copy_now and source is not None and relay.ledger.waits_for_spark():
            _session_for_the_ledger(relay, source)
        flusher.stop(copy_now=copy_now)
        if line is not None:
            line.close(stats)
    remaining: list[TopicState] = []
    unverified = None
    if bound is not None:
        try:
            remaining = _remaining(relay, bound)
        except RelayError as exc:
            unverified = f"drain not verified: PostgreSQL unreachable at the end ({exc})"
            log.error("%s", unverified)
    code = _exit_code(available_now, stop.interrupted, failed, remaining,
                      verified=unverified is None, failure=failure)
    spent = budget.seconds if stop.ran_out and remaining else None
    return RunResult(code, stats, time.monotonic() - started, remaining, unverified,
                     None if spent is None else describe(spent))


def _session_for_the_ledger(relay: Relay, source: SparkSource) -> None:
    """A run that ended without Spark (a drain the driver's producer finished) with
    records staged that Spark copies (a Databricks Volume): the session is built for the
    end's copy, or they would wait for a run that meets a backlog."""
    log.info("ledger: building the Spark session for the ledger's copy (its writer is Spark)")
    try:
        relay.attach_spark(source.result())
    except Exception as exc:  # the records stay staged, copied by a later run
        log.warning("ledger: no Spark session for the copy, the records stay staged: %s",
                    first_line(exc))


def _progress_line(relay: Relay, progress: TextIO | None, bound: int | None
                   ) -> Progress | None:
    if progress is None or bound is None:
        return None
    settings = relay.config.relay
    waiting = waiting_up_to(relay.db, bound, TopicFilter(settings.include_topics,
                                                         settings.exclude_topics))
    return Progress(progress, waiting)


def _from_before(relay: Relay, bound: int) -> list[TopicState]:
    """Topics holding rows that existed when an available-now run started."""
    return [s for s in left_over(relay, bound) if s.below_bound]


def _drained(relay: Relay, bound: int) -> bool:
    """Whether an available-now run has nothing left from before its start (then a query
    would only start, find no work and end: seconds of launch to exit)."""
    try:
        return not _from_before(relay, bound)
    except RelayError:
        return False  # the query's source polls again, and the end is verified anyway


def _remaining(relay: Relay, bound: int) -> list[TopicState]:
    """Topics that still hold rows which existed when the drain started.

    Raises RelayError when PostgreSQL cannot tell: an empty answer would claim a drain
    that nobody verified. A connection dropped earlier fails its first use, so retry.
    """
    for attempt in range(1, _REMAINING_ATTEMPTS + 1):
        try:
            return _from_before(relay, bound)
        except RelayError as exc:
            if attempt == _REMAINING_ATTEMPTS:
                raise
            log.warning("cannot tell what is left in the outbox yet, retrying: %s", exc)
            time.sleep(_REMAINING_PAUSE_S)
    raise AssertionError("unreachable")


def _exit_code(
    available_now: bool, stopped: bool, failed: bool, remaining: list[TopicState],
    verified: bool = True, failure: BaseException | None = None,
) -> ExitCode:
    """`failure`: what ended a batch body, if one did. Spark hands it back wrapped in a
    StreamingQueryException, so the code comes from the body's own exception: a database
    error or a defect has a code of its own, and only Spark's failures are QUERY_FAILED."""
    if failed:
        return EXIT_FAILED if failure is None else exit_code_for(failure)
    if not available_now:
        return EXIT_OK
    if not verified:
        return ExitCode.NOT_VERIFIED
    if not remaining:
        return EXIT_OK
    return EXIT_INTERRUPTED if stopped else EXIT_LEFT_OVER
