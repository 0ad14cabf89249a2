"""The start of a run: rounds go on while Spark starts the streaming query.

Starting the query (registering the source, its Python worker, the first offsets and the
checkpoint's first entries) takes seconds, in which a backlog would wait: in-process W1
profile (bench/), 5 s between the start-up round and the first micro-batch body. So the
query starts on a thread of its own while the driver runs rounds here, until the query's
first body takes over. Rounds never overlap: each holds the batch-body lock
(relay.stream.stop), which that first body then waits for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress

from pyspark.sql.streaming.query import StreamingQuery

from relay.stream.batch import BatchProcessor
from relay.stream.stop import StopSignal


class _QueryStart:
    """Runs `start` on a thread; `result()` returns its query or raises its error."""

    def __init__(self, start: Callable[[], StreamingQuery]) -> None:
        self._start = start
        self._query: StreamingQuery | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="relay-query-start",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._query = self._start()
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc

    def ended_or_failed(self) -> bool:
        """Whether starting failed, or the query started and has already ended."""
        if self._thread.is_alive():
            return False
        return self._error is not None or not (self._query and self._query.isActive)

    def result(self) -> StreamingQuery:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._query is not None
        return self._query


def start_while_delivering(
    start: Callable[[], StreamingQuery],
    processor: BatchProcessor,
    stop: StopSignal,
    done: Callable[[], bool],
) -> StreamingQuery:
    """Starts the query and runs rounds until its first body does; `done` tells when
    there is nothing left for this run (an available-now drain finished meanwhile)."""
    starting = _QueryStart(start)
    idle_s = processor.relay.config.relay.poll_interval_s
    try:
        while not (processor.body_started.is_set() or stop.requested
                   or starting.ended_or_failed()):
            if processor.run_rounds("start-up round", 0, bounded=True):
                continue
            if done():
                break
            processor.body_started.wait(idle_s)
    except BaseException:
        # A round failed: the query must not go on running without its runner.
        with suppress(BaseException):
            starting.result().stop()
        raise
    return starting.result()
