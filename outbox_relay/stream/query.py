"""The streaming query of a run whose Spark session is up: the frame of its rounds.

One round runs before Spark's first trigger (a (re)started relay delivers first), the
query starts beside it or after it (outbox_relay.stream.starting), and the runner waits
for the query while honouring a stop (outbox_relay.stream.watching). What failed is
judged here: a failure our own stop caused is no failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from outbox_relay.config import Config
from outbox_relay.config.load import to_json_without_secrets
from outbox_relay.errors import first_line
from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.source import SOURCE_NAME, OutboxSource
from outbox_relay.stream.starting import (
    START_ATTEMPTS,
    QueryStart,
    rounds_until_first_body,
    start_timed_out,
    warm_up_in_background,
)
from outbox_relay.stream.stop import StopSignal
from outbox_relay.stream.watching import await_query, stop_side_effect, watched_pid

log = logging.getLogger(__name__)


def start_query(spark: SparkSession, config: Config, processor: BatchProcessor,
                available_now: bool, bound: int | None = None) -> StreamingQuery:
    """`bound` (available-now): the highest id the drain must move, for the source too."""
    log.info("starting the streaming query")
    spark.dataSource.register(OutboxSource)
    reader = spark.readStream.format(SOURCE_NAME).option(
        "config", to_json_without_secrets(config))
    if bound is not None:
        reader = reader.option("bound", str(bound))
    writer = (
        reader.load()
        .writeStream.foreachBatch(processor)
        .option("checkpointLocation", config.relay.checkpoint_path)
        .queryName(f"outbox-relay:{config.relay.source_name}")
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime="0 seconds")
    )
    return writer.start()



def run_with_query(spark: SparkSession, config: Config, processor: BatchProcessor,
                   available_now: bool, bound: int | None, stop: StopSignal,
                   drained: Callable[[], bool]) -> bool:
    """Runs `processor`'s rounds in the query's frame until it ends; returns whether the
    run failed (`processor.failure` says why when a body failed). `drained` says whether
    an available-now run has nothing left from before its start."""
    failed = False
    stopping = starting = False
    watched = watched_pid()
    starter = QueryStart(lambda: start_query(spark, config, processor, available_now, bound), stop)
    try:
        # One round before Spark's first trigger: starting the query and its source's
        # Python worker takes seconds, and a (re)started relay should deliver first. The
        # query starts beside it once it is needed (outbox_relay.stream.starting).
        processor.when_backlogged(starter.begin)
        try:
            processor.run_rounds("start-up round", 0)
            processor.when_backlogged(None)
            if not stop.requested:
                _until_the_first_body(processor, starter, stop, config, available_now)
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
            idle = stop.requested or (bound is not None and drained())
            query = None if idle else start_query(spark, config, processor, available_now, bound)
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
            query = start_query(spark, config, processor, available_now, bound)
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
    return failed


def _until_the_first_body(processor: BatchProcessor, starter: QueryStart, stop: StopSignal,
                          config: Config, available_now: bool) -> None:
    """After the start-up round: the data plane's warm-up, and the rounds of a continuous
    relay until the query's first body takes over (rounds_until_first_body).

    The warm-up runs when the start-up round sent nothing (beside a first round with
    work, the two only took turns on the cores), or beside the direct lane's rounds,
    unless a backlog already warms the Spark lane. Without the direct lane, only a relay
    that started idle runs rounds before the first body: they wait for the warm-up."""
    direct = config.relay.direct_lane and not available_now
    idle = not processor.stats.batches
    if not (idle or direct):
        return
    warm = None if starter.begun else warm_up_in_background(processor.warm_up,
                                                              lambda: stop.requested)
    if available_now or (starter.begun and not direct):
        return
    poll = config.relay.poll_interval_s
    # As long as a batch body's rounds (their drain lanes then run as a body's do), or
    # a poll's when bodies run one round each.
    body_s = config.relay.micro_batch_s or poll

    def rounds(until: Callable[[], bool] | None) -> None:
        if until is None:
            processor.run_rounds("start-up round", poll)
        else:
            processor.run_rounds("start-up rounds", body_s, until)

    rounds_until_first_body(rounds, starter, stop, None if direct else warm)

