"""What a relay does in its first seconds beside its first round: the data plane's
warm-up (outbox_relay.data.warm_up) and the streaming query's start.

The first round runs before the query starts (outbox_relay.stream.runner), and starting the
query took 2.4-5.2 s on two cores: a 1M-row drain delivered nothing meanwhile, between
its first round and its second. So when a claim of the first round stops at its limit
(a backlog), the query starts in a thread of its own beside that round's write; its
first batch body waits for the round to end (StopSignal.batch_body), so the two never
run rounds at once. Otherwise it starts after the first round: beside a small first
write, the two only took turns on the cores and the first message waited longer, and an
available-now drain that the first round empties starts no query at all. A continuous
relay keeps running rounds until the query's first body takes over
(rounds_until_first_body); without the direct lane, one that starts idle warms its data
plane first.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from pyspark.sql.streaming.query import StreamingQuery

from outbox_relay import failpoints
from outbox_relay.errors import first_line
from outbox_relay.stream.stop import StopSignal

log = logging.getLogger(__name__)

# The query's source runs in a Python worker that the JVM starts at the query's start and
# waits 10 s for (PythonWorkerFactory, not configurable). On a loaded machine (three relays
# starting on two cores: tests/faults/test_ownership.py) that wait ran out, and the relay
# exited with nothing delivered. Nothing of the query had run, so it is started again.
START_ATTEMPTS = 3
# How often a start waiting for the warm-up looks at the stop flag, and how long it waits
# at most: a warm-up that takes longer waits on a service (its JDBC connection, the
# broker), and the rounds, which meet the same service, go on beside it and report it.
_WARM_WAIT_S = 0.1
WARM_WAIT_MAX_S = 30.0
_WORKER_LATE = re.compile(r"Python worker failed to connect back"
                          r"|Timed out while waiting for the Python worker to connect back")


def start_timed_out(error: BaseException, query: StreamingQuery,
                    body_failure: BaseException | None) -> bool:
    """Whether the query ended only because its source's worker connected back too late:
    before any micro-batch completed, and with no batch body failed (a body's own worker
    failing stays that body's failure)."""
    text = f"{error}\n{getattr(error, '_stackTrace', '') or ''}"
    return (body_failure is None and query.lastProgress is None
            and _WORKER_LATE.search(text) is not None)


class QueryStart:
    """Starts the query once, in a thread; `result` waits for it and raises its error.
    Never after a stop: a query started then would only be stopped again, and a signal
    to the process group can reach its source's Python worker while it starts."""

    def __init__(self, start: Callable[[], StreamingQuery], stop: StopSignal) -> None:
        self._start = start
        self._stop = stop
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._query: StreamingQuery | None = None
        self._error: BaseException | None = None

    @property
    def begun(self) -> bool:
        with self._guard:
            return self._thread is not None

    def begin(self) -> None:
        """Starts the query in the background; a second call, or one after a stop, does
        nothing."""
        with self._guard:
            if self._thread is not None or self._stop.requested:
                return
            self._thread = threading.Thread(target=self._run, name="relay-query-start",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._query = self._start()
        except BaseException as exc:  # handed to the runner's thread by result()
            self._error = exc

    def result(self) -> StreamingQuery | None:
        """The started query (None if never begun), once its start has returned."""
        with self._guard:
            thread = self._thread
        if thread is None:
            return None
        thread.join()
        if self._error is not None:
            raise self._error
        return self._query

    def gone(self) -> bool:
        """Whether the start has returned without a running query: it failed, or the
        query has ended already."""
        with self._guard:
            thread = self._thread
        if thread is None or thread.is_alive():
            return False
        if self._error is not None or self._query is None:
            return True
        try:
            return not self._query.isActive
        except Exception:  # the JVM is gone: so is the query
            return True

    def abandon(self) -> None:
        """For a run that fails before it uses the query (the stop flag is set already,
        StopSignal.abort): waits for the start, and stops the query if it started, between
        two batches as every stop does (a body that waits for its turn sees the flag and
        returns, so the stop takes no longer than Spark's own)."""
        try:
            query = self.result()
        except BaseException:
            return  # the run's own error is what it reports
        if query is not None:
            try:
                with self._stop.between_batches():
                    query.stop()
            except Exception as exc:
                log.warning("could not stop the streaming query: %s", first_line(exc))


def warm_up_in_background(warm_up: Callable[[], None], stopping: Callable[[], bool]
                          ) -> threading.Thread:
    """Runs the data plane's warm-up in a daemon thread. A failure only costs the first
    write its warmth, and the round that meets the same cause reports it: logged, not
    raised."""

    def run() -> None:
        try:
            warm_up()
            log.debug("the data plane is warm")
        except Exception as exc:
            if not stopping():
                log.warning("the data plane's warm-up failed (the first write will be "
                            "slower): %s", first_line(exc))

    thread = threading.Thread(target=run, name="relay-warm-up", daemon=True)
    thread.start()
    return thread


def rounds_until_first_body(rounds: Callable[[Callable[[], bool] | None], None],
                            starter: QueryStart, stop: StopSignal,
                            warm: threading.Thread | None) -> None:
    """A continuous relay's rounds until the query's first batch body waits for its turn:
    this thread runs the rounds that body would run, so the query's start and first
    trigger (3.1 s and 2.9 s on a quiet machine) hold no message up. `rounds(None)` runs
    a poll interval's worth; `rounds(until)` runs them as a body does, drain lanes beside
    them, until `until()` says the body waits (or the query is gone). In poll-long calls,
    each call ended its drain lanes and waited for their round in flight: a backlog
    that came during the start held the busy topics up for a drain round every poll.

    `warm`: the data plane's warm-up, which the rounds wait for when every write is a
    Spark job (no direct lane): a relay that started idle sends its first messages as
    soon as the data plane is warm. Started beside the warm-up, the query's start and
    first trigger took the cores from it, and the first message waited for both (a
    probe: delivered 26.5 s after launch, where the warm-up alone ends about 7 s after
    the session); the first round then runs before the query starts, so that the
    messages that waited for the warm-up go out alone (beside the start, their write
    took 3.0 s instead of 2.2 s). None: the driver's producer sends the small rounds,
    which need nothing of Spark's, so nothing waits. Available-now runs keep the query
    for their rounds: their end is its end.
    """
    if warm is not None:
        deadline = time.monotonic() + WARM_WAIT_MAX_S
        while warm.is_alive() and not stop.requested and time.monotonic() < deadline:
            warm.join(_WARM_WAIT_S)
    if stop.requested:
        return
    failpoints.hold("first_bridge_round")
    rounds(None)
    if stop.requested:
        return
    starter.begin()

    def taken_over() -> bool:
        return stop.body_waiting or starter.gone()

    second = True
    # Again after a call that gave up (a lost connection) or reached its deadline.
    while not (stop.requested or taken_over()):
        if second and failpoints.armed("second_bridge_round_db_error"):
            failpoints.trip("round_db_error")
        second = False
        rounds(taken_over)
