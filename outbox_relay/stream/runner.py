"""Runs the streaming query: continuous or available-now, with graceful stops and exit codes."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TextIO

from pyspark.sql.streaming.query import StreamingQuery

from outbox_relay.config.load import to_json_without_secrets
from outbox_relay.control.pending import (
    TopicFilter,
    TopicState,
    max_id,
    pending_topics,
    waiting_up_to,
)
from outbox_relay.errors import RelayError, exit_code_for, first_line
from outbox_relay.exit_codes import ExitCode
from outbox_relay.ledger.flusher import LedgerFlusher
from outbox_relay.observe.progress import Progress
from outbox_relay.observe.serve import exported
from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.budget import TimeBudget, describe
from outbox_relay.stream.source import SOURCE_NAME, OutboxSource
from outbox_relay.stream.starting import (
    START_ATTEMPTS,
    QueryStart,
    rounds_until_first_body,
    start_timed_out,
    warm_up_in_background,
)
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal, forward_jvm_signals
from outbox_relay.stream.watching import await_query, stop_side_effect, watched_pid
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


def start_query(relay: Relay, processor: BatchProcessor, available_now: bool,
                bound: int | None = None) -> StreamingQuery:
    """`bound` (available-now): the highest id the drain must move, for the source too."""
    log.info("starting the streaming query")
    spark = relay.spark
    spark.dataSource.register(OutboxSource)
    reader = spark.readStream.format(SOURCE_NAME).option(
        "config", to_json_without_secrets(relay.config))
    if bound is not None:
        reader = reader.option("bound", str(bound))
    writer = (
        reader.load()
        .writeStream.foreachBatch(processor)
        .option("checkpointLocation", relay.config.relay.checkpoint_path)
        .queryName(f"outbox-relay:{relay.config.relay.source_name}")
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime="0 seconds")
    )
    return writer.start()


def left_over(relay: Relay, bound: int | None = None) -> list[TopicState]:
    settings = relay.config.relay
    topic_filter = TopicFilter(settings.include_topics, settings.exclude_topics)
    return pending_topics(relay.db, settings.lock_timeout_s, topic_filter, bound)


def run(relay: Relay, available_now: bool, stop: StopSignal | None = None,
        progress: TextIO | None = None, started: float | None = None) -> RunResult:
    """Runs the relay until it drained (available-now) or is stopped. Its metrics are
    served meanwhile, or pushed at the end (outbox_relay.observe.serve); `progress`, for an
    available-now run, receives the progress line. An available-now run's time budget
    counts from `started` (time.monotonic(); default: now)."""
    metrics = relay.config.metrics
    with exported(metrics, relay.metrics.registry, available_now,
                  relay.config.relay.source_name):
        return _run(relay, available_now, stop or StopSignal(), progress, started)


def _run(relay: Relay, available_now: bool, stop: StopSignal,
         progress: TextIO | None, launched: float | None) -> RunResult:
    started = time.monotonic()
    bound = max_id(relay.db) if available_now else None
    forward_jvm_signals(relay.spark, stop)
    processor = batch_processor(relay, stop, bound=bound, continuous=not available_now)
    if progress is not None and bound is not None:
        settings = relay.config.relay
        waiting = waiting_up_to(relay.db, bound, TopicFilter(settings.include_topics,
                                                             settings.exclude_topics))
        processor.progress = Progress(progress, waiting)
    flusher = LedgerFlusher.for_run(relay.ledger, relay.config.ledger, available_now,
                                    processor.draining)
    flusher.start()
    failed = False
    stopping = starting = False
    watched = watched_pid()
    starter = QueryStart(lambda: start_query(relay, processor, available_now, bound), stop)
    budget = TimeBudget(relay.config.relay.available_now_budget_s if available_now else None,
                        started if launched is None else launched, stop)
    try:
        # One round before Spark's first trigger: starting the query and its source's
        # Python worker takes seconds, and a (re)started relay should deliver first. The
        # query starts beside it once it is needed (outbox_relay.stream.starting).
        processor.when_backlogged(starter.begin)
        try:
            processor.run_rounds("start-up round", 0)
            processor.when_backlogged(None)
            if not processor.stats.batches and not stop.requested:
                # Nothing to send yet: the data plane warms up before the first message
                # comes (beside a first round with work, the two only took turns on the
                # cores).
                warm = warm_up_in_background(processor.warm_up, lambda: stop.requested)
                if not available_now and not starter.begun:
                    poll = relay.config.relay.poll_interval_s
                    rounds_until_first_body(
                        lambda: processor.run_rounds("start-up round", poll),
                        starter, stop, warm)
        except BaseException as exc:
            # Its first batch body may be waiting for its turn already: it must not run.
            stop.abort(f"the relay's start failed: {first_line(exc)}")
            starter.abandon()
            raise
        # A stop signal to the process group also reaches the Python worker that starting
        # the query spawns, and fails the start: that is the stop, not a failure.
        starting = True
        if starter.begun:
            # Its first batch body may be running rounds already: the main lane's
            # connection is the body's now.
            query = starter.result()
        else:
            idle = stop.requested or (bound is not None and _drained(relay, bound))
            query = None if idle else start_query(relay, processor, available_now, bound)
        starting = False
        log.debug("the streaming query started")
        for attempt in range(2, START_ATTEMPTS + 2):
            ended = "ended" if query is None else await_query(query, stop, watched)
            if query is not None and ended == "stop":
                with stop.between_batches():
                    stopping = True
                    query.stop()
            error = query.exception() if query is not None else None
            late = (query is not None and error is not None
                    and start_timed_out(error, query, processor.failure))
            if late and (stopping or stop.requested):
                # Nothing of the query ran, and a new start would only be stopped: the
                # run ends as its stop (a signal, a spent time budget) ends it.
                log.warning("the streaming query did not start before the stop: its "
                            "source's Python worker did not connect back in time")
                error = None
                break
            if not late or attempt > START_ATTEMPTS:
                if isinstance(ended, BaseException):
                    raise ended  # as awaitTermination raised it: judged below
                break
            log.warning("the streaming query did not start: its source's Python worker "
                        "did not connect back in time (a loaded machine); starting it "
                        "again (attempt %d of %d)", attempt, START_ATTEMPTS)
            starting = True
            query = start_query(relay, processor, available_now, bound)
            starting = False
        log.debug("the streaming query ended")
        # A failed body aborts the run (StopSignal.abort), so the runner may have stopped
        # the query before Spark recorded the failure: the body's own failure counts.
        failed = processor.failure is not None or (
            error is not None and not stop_side_effect(stop, stopping, processor, error))
    except Exception as exc:
        if stop_side_effect(stop, stopping or (starting and stop.requested), processor, exc):
            log.warning("the stop interrupted Spark outside a batch body (nothing was in "
                        "flight; a checkpoint entry cut short is redone on restart): %s",
                        first_line(exc)[:300])
        else:
            log.error("the run failed: %s", first_line(exc))
            failed = True
    finally:
        budget.cancel()
        # A drain its budget ended copies as a drain's end does; a stop signal does not.
        flusher.stop(copy_now=not stop.requested or (stop.ran_out and processor.failure is None))
        if processor.progress is not None:
            processor.progress.close(processor.stats)
    remaining: list[TopicState] = []
    unverified = None
    if bound is not None:
        try:
            remaining = _remaining(relay, bound)
        except RelayError as exc:
            unverified = f"drain not verified: PostgreSQL unreachable at the end ({exc})"
            log.error("%s", unverified)
    code = _exit_code(available_now, stop.interrupted, failed, remaining,
                      verified=unverified is None, failure=processor.failure)
    spent = budget.seconds if stop.ran_out and remaining else None
    return RunResult(code, processor.stats, time.monotonic() - started, remaining, unverified,
                     None if spent is None else describe(spent))


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
