"""The drain lane: rounds for topics with a backlog, in a thread beside the main rounds.

A round lasts as long as its largest claim takes. A topic that drains a backlog fills
every claim to `relay.batch_size`, and in one lane every other topic's messages wait for
such a round and then their own: the busy topics' p99 was 1.0-1.7 s while one topic
drained 500,000 rows (reports/performance-history.md, W5). So a topic whose claim stopped at its
limit (Claim.more) moves to the drain lane, whose rounds run beside the main lane's, and comes
back once a claim of it no longer fills up.

Per-key order holds because a topic is in one lane at a time and changes lane only
between its rounds: after the round that moved it has deleted what Kafka acknowledged
and released its lock. Each lane claims under a token of its own (outbox_relay.wiring), so the
one-owner lock also keeps a topic to one lane. The drain lane's Spark jobs run in a
scheduler pool of their own (outbox_relay/fairscheduler.xml), below the main rounds'.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from outbox_relay.errors import (
    RETRY_PAUSE_S,
    DatabaseUnavailableError,
    RelayError,
    UnreachableError,
    exit_code_for,
    first_line,
)
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.stream.stop import StopSignal

log = logging.getLogger(__name__)
# A drain lane's thread: what its log lines (and the tests reading them) name it by.
LANE_THREAD = "relay-drain-lane"

DRAIN_POOL = "relay-drain"
# A topic leaves the drain lane at the end of every batch body and comes back after the
# next body's first round (a second or two of Spark's trigger between them): the lane
# counts as working until it has held nothing for this long.
DRAIN_QUIET_S = 10.0


def report_failure(metrics: RuntimeMetrics | None, lane: str, what: str,
                   exc: BaseException) -> None:
    """Logs, in the relay's own format, an error that ended a lane's rounds, and counts it
    by the exit code it maps to: one line for an error of the relay, the traceback for
    anything else."""
    kind = exit_code_for(exc).name.lower()
    if metrics is not None:
        metrics.lane_failure(lane, kind)
    if isinstance(exc, RelayError):
        log.error("%s (%s): %s", what, kind, first_line(exc))
    else:
        log.error("%s (%s): %s", what, kind, exc, exc_info=exc)


class Rounds(Protocol):
    """The drain lane's rounds (outbox_relay.stream.batch.BatchProcessor on the lane's Relay)."""

    @property
    def backlogged(self) -> frozenset[str]:
        """The topics of the last round whose claims stopped at their limit."""
        ...

    def run_once(self, bound: int | None = None, only: Collection[str] | None = None
                 ) -> bool: ...

    def make_way(self) -> bool:
        """Pauses when other relays poll this outbox, so that they get topics too;
        returns whether a stop came meanwhile."""
        ...

    def close(self) -> None: ...


class LaneSplit:
    """Which topics the drain lane holds; thread-safe."""

    def __init__(self) -> None:
        self._guard = threading.Condition()
        self._draining: set[str] = set()
        self._emptied_at = float("-inf")

    @property
    def draining(self) -> frozenset[str]:
        with self._guard:
            return frozenset(self._draining)

    def hand_over(self, topics: Collection[str]) -> None:
        """To the drain lane; only after the main round that claimed them has finished."""
        if topics:
            with self._guard:
                self._draining |= set(topics)
                self._guard.notify_all()

    def give_back(self, topics: Collection[str]) -> None:
        """To the main lane; only after the drain round that claimed them has finished."""
        if topics:
            with self._guard:
                self._draining -= set(topics)
                if not self._draining:
                    self._emptied_at = time.monotonic()

    def held_within(self, seconds: float) -> bool:
        """Whether the lane holds topics, or held some less than `seconds` ago."""
        with self._guard:
            return bool(self._draining) or time.monotonic() - self._emptied_at < seconds

    def wait(self, timeout: float) -> frozenset[str]:
        """The drain lane's topics, waiting up to `timeout` for some when it has none."""
        with self._guard:
            self._guard.wait_for(lambda: bool(self._draining), timeout)
            return frozenset(self._draining)

    def wake(self) -> None:
        with self._guard:
            self._guard.notify_all()


class DrainLane:
    """Runs the drain lane's rounds in a thread, for the length of one batch body."""

    def __init__(self, rounds: Rounds, spark: Any, stop: StopSignal, poll_s: float,
                 metrics: RuntimeMetrics | None = None) -> None:
        self.split = LaneSplit()
        self._rounds = rounds
        self._spark = spark
        self._stop = stop
        self._poll_s = poll_s
        self._metrics = metrics
        self._ending = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None  # what ended the lane's thread, if not asked
        self.failed_at = float("inf")  # when (monotonic) the lane's failure happened

    @property
    def busy(self) -> bool:
        """Whether it holds topics: an available-now body must not end meanwhile."""
        thread = self._thread
        return thread is not None and thread.is_alive() and bool(self.split.draining)

    def start(self, deadline: float, bound: int | None) -> None:
        self._ending.clear()
        self.failure = None
        self.failed_at = float("inf")
        self._thread = threading.Thread(target=self._run, args=(deadline, bound),
                                        name=LANE_THREAD, daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Waits up to `timeout` for the lane to end by itself (a stop, its deadline, a
        failure); returns whether it has."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def close(self) -> None:
        self._rounds.close()

    def end(self) -> None:
        """Ends the lane after its round in flight and gives its topics back; raises the
        error that ended the lane, after the lane has stopped."""
        self._ending.set()
        self.split.wake()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.split.give_back(self.split.draining)
        if self.failure is not None:
            raise self.failure

    def _over(self, deadline: float) -> bool:
        return (self._ending.is_set() or self._stop.requested
                or time.monotonic() >= deadline or self.failure is not None)

    def _run(self, deadline: float, bound: int | None) -> None:
        try:
            self._spark.sparkContext.setLocalProperty("spark.scheduler.pool", DRAIN_POOL)
            while not self._over(deadline):
                topics = self.split.wait(self._poll_s)
                if topics and not self._over(deadline):
                    self._round(topics, bound)
        except BaseException as exc:
            # Not retried here: the batch body's end() raises it, and the run's exit code
            # says what it was. The topics go back at once, so that the main lane neither
            # leaves them out nor idles on them until the body's deadline.
            self.failed_at = time.monotonic()
            self.failure = exc
            self.split.give_back(self.split.draining)
            report_failure(self._metrics, "drain", "the drain lane ended", exc)

    def _round(self, topics: frozenset[str], bound: int | None) -> None:
        """One round and the pause after it, which reads the database too."""
        try:
            self._rounds.run_once(bound, only=topics)
            self.split.give_back(topics - self._rounds.backlogged)
            # A topic another relay takes meanwhile is not ready for the next round,
            # which then gives it back.
            self._rounds.make_way()
        except (DatabaseUnavailableError, UnreachableError) as exc:
            # Nothing was deleted that Kafka did not acknowledge; rows stay, locks expire.
            # The topics go back: the main lane's own error handling decides next.
            self.split.give_back(topics)
            report_failure(self._metrics, "drain", "the drain lane gave up its round", exc)
            self._ending.wait(RETRY_PAUSE_S)


def hand_over(lanes: Sequence[DrainLane], topics: Collection[str]) -> None:
    """Each topic to the drain lane that holds the fewest, so that every lane has work
    while there is enough: one lane's claim and delete then run under another's write.
    Only after the main round that claimed them has finished."""
    for topic in sorted(topics):
        lane = min(lanes, key=lambda d: len(d.split.draining))
        lane.split.hand_over([topic])


def end_lanes(lanes: Sequence[DrainLane], main: tuple[float, BaseException] | None,
              metrics: RuntimeMetrics | None,
              retried: tuple[type[BaseException], ...]) -> None:
    """Ends every drain lane (one lane's failure must not leave another's thread running
    rounds). When lanes failed, the first failure is the body's, so that the run's exit
    code names it: a lane's is raised when it came before the main lane's `main` (when,
    what), if any. One that is `retried` (a lost connection) decides only when nothing
    else failed. Each lane logged its own failure; the main lane's is logged here when a
    lane's decides."""
    failures = [] if main is None else [main]
    for lane in lanes:
        try:
            lane.end()
        except BaseException as exc:
            failures.append((lane.failed_at, exc))
    if not failures:
        return
    _, first = min(failures, key=lambda f: (isinstance(f[1], retried), f[0]))
    if main is not None and first is main[1]:
        return
    if main is not None:
        report_failure(metrics, "main", "the main lane failed after a drain lane", main[1])
    raise first
