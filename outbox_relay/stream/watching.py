"""Watching the running query from the driver: waiting for it while honouring a stop
request or the launcher's death, and telling a failure our own stop caused (Spark
interrupted, or a child of the JVM killed by the group's signal) from a real one."""

from __future__ import annotations

import os
import re

from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.query import StreamingQuery

from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.stop import StopSignal

# A signal to the whole process group (Ctrl-C, `kill -TERM -PGID`) also reaches the
# JVM's children:
# - the `chmod` that Hadoop forks for every local checkpoint file when its native library
#   is missing: a write caught by it fails with the helper's exit code (128 + signal) and
#   ends the query, although the batch body had finished; Spark redoes the missing
#   checkpoint entry on restart. Java forks it through jspawnhelper, and the signal may
#   also catch that helper itself;
# - pyspark.daemon, which serves the outbox source's Python worker: the query's planning
#   of its next micro-batch (the source's ticks; no data) then fails. The bench's
#   start/stop caught it in 2 runs of 3 with a SIGTERM during the query's first seconds;
# - the source's Python worker while the query starts it (PythonStreamingSourceRunner's
#   init reads the worker's first reply and meets its end): one start/stop of a full
#   bench run, with the query still initializing.
# A Python worker a batch body needed (a transform's) fails that body instead, which
# stays a failure (BatchProcessor.failure).
_HELPER_KILLED = re.compile(
    r"ExitCodeException exitCode=(?:130|143)\b"
    r"|Failed to exec spawn helper: pid: \d+, signal: (?:2|15)\b"
    r"|EOFException occurred while reading the port number from pyspark\.daemon"
    r"|Python worker exited unexpectedly \(crashed\)"
    r"|EOFException\s+at \S+\.readInt\S*\s+at \S+\.PythonStreamingSourceRunner\.init\("
)


def await_query(query: StreamingQuery, stop: StopSignal,
                watched: int) -> str | StreamingQueryException:
    """Waits while the query runs: "stop" as soon as a stop is asked for (or the launcher
    is gone), "ended" once the query ended by itself, or the error awaitTermination raised
    when it ended with one. That error, not query.exception(), is the one to judge: only
    its text holds the Java causes (a killed helper's exit code, stop_killed_a_helper)."""
    while query.isActive:
        if not stop.requested and not alive(watched):
            stop.request("the process that launched the relay is gone")
        if stop.requested:
            return "stop"
        try:
            query.awaitTermination(1)
        except StreamingQueryException as exc:
            return exc
    if query.exception() is not None:
        # Ended before it was waited for (a group signal's helper kill, as the stop came):
        # the error awaitTermination raises, with its causes, is the one to judge. The
        # query has ended, so it returns at once.
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            return exc
    return "ended"


def stop_side_effect(stop: StopSignal, stopping: bool, processor: BatchProcessor,
                      exc: BaseException) -> bool:
    """Whether the query failed only because of our own stop, not in a batch body.

    query.stop() interrupts the stream thread, and while it writes the checkpoint's commit
    entry or asks the source for offsets, Spark may report that interruption as a failure.
    No batch body runs then (the runner holds between_batches()), so nothing is lost:
    the source carries no data and a redone tick only claims again.
    """
    if processor.failure is not None:
        return False
    return stopping or stop_killed_a_helper(stop, exc)


def stop_killed_a_helper(stop: StopSignal, exc: BaseException) -> bool:
    """Whether the query failed only because our own stop signal killed a child of the
    JVM: a Hadoop helper, or the Python daemon of the source's worker."""
    if not stop.requested:
        return False
    text = f"{exc}\n{getattr(exc, '_stackTrace', '') or ''}"
    return _HELPER_KILLED.search(text) is not None


def watched_pid() -> int:
    """The launcher whose death must stop us: spark-submit's JVM, or our parent."""
    return int(os.environ.get("RELAY_WATCH_PID") or os.getppid())


def alive(pid: int) -> bool:
    if pid <= 1:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
