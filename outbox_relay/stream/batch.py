"""The body of foreachBatch: rounds (outbox_relay.stream.round) for every ready topic at once.

A body runs rounds for up to `relay.micro_batch_s`: Spark's own cost per trigger (offset
and commit logs, planning, about 1 s on 2 cores) is then paid once for many rounds
instead of once per round. Between rounds no lock is held and the stop flag is read, so
a stop still ends the body after the round in flight. Topics with a backlog run their
rounds in the drain lane beside these (outbox_relay.stream.lanes), for the length of the body.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Sequence

from pyspark.sql import DataFrame

from outbox_relay.control.db import Database
from outbox_relay.control.idle_watch import IdlePoll
from outbox_relay.control.pending import (
    TopicFilter,
    pending_params,
    pending_topics,
    ready_topics,
    relays_polling,
    scan_lock,
)
from outbox_relay.errors import RETRY_PAUSE_S, DatabaseUnavailableError, UnreachableError
from outbox_relay.observe.progress import Progress
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.stream.batch_settings import BatchSettings
from outbox_relay.stream.lanes import (
    DRAIN_QUIET_S,
    DrainLane,
    end_lanes,
    hand_over,
    report_failure,
)
from outbox_relay.stream.round import Round
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal

log = logging.getLogger(__name__)

# How long a continuous body finds no work before it polls at the idle interval.
IDLE_AFTER_S = 1.0
# Failures after which a batch body gives up its rounds and the next ones try again.
_RETRIED = (DatabaseUnavailableError, UnreachableError)

class BatchProcessor:
    """`new_round` builds the lane's Round, given what to call after each round that
    locked a topic; `drains` are the drain lanes beside it (none when they are off)."""

    def __init__(self, db: Database, metrics: RuntimeMetrics, settings: BatchSettings,
                 new_round: Callable[[Callable[[], None]], Round], stop: StopSignal, *,
                 bound: int | None = None, continuous: bool = False,
                 stats: RelayStats | None = None, drains: Sequence[DrainLane] = ()) -> None:
        self._db = db
        self._scan = scan_lock(db.config.url)  # this outbox's, shared by its lanes
        self._metrics = metrics
        self._settings = settings
        self.stop = stop
        # Available-now: after a body's first round, only topics with rows up to `bound`
        # (what existed at the start) start another, so rows written during a drain
        # cannot keep a body running. The first round takes whatever is ready, as the
        # source (polling up to the same bound) expects of every micro-batch.
        self.bound = bound
        self._bound_first = False
        # Continuous: an idle body keeps polling until its time is up, so a message
        # written then waits for one poll, not for Spark's next trigger.
        self.continuous = continuous
        self.stats = stats if stats is not None else RelayStats()
        self._filter = TopicFilter(settings.include_topics, settings.exclude_topics)
        self._round = new_round(self._show_progress)
        # Set by the runner for an available-now drain on a terminal.
        self.progress: Progress | None = None
        # The error that ended a batch body, if one did: the runner tells it apart from
        # what its own query.stop() makes Spark raise after the last body finished.
        self.failure: BaseException | None = None
        # The backlogged topics of the last round that finished. Unlike `backlogged`, it
        # keeps its value while the next round runs (see `draining`).
        self._found_backlog: frozenset[str] = frozenset()
        self._drains = list(drains)
        self._worked_at = time.monotonic()  # when a round last locked a topic
        self.last_worked = False  # whether the last round did

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.run_rounds(f"micro-batch {batch_id}", self._settings.micro_batch_s)

    def run_rounds(self, label: str, seconds: float,
                   until: Callable[[], bool] | None = None) -> None:
        """Rounds until `seconds` are up, the stop is requested, `until` says so after a
        round, or (available-now) a round finds nothing to do; always at least one round.

        A failure that is not retried ends the run: it stops everything that runs
        (StopSignal.abort) before this body lets go of its turn, so that a batch body
        waiting for the turn (the query's first, behind the runner's start-up rounds:
        outbox_relay.stream.starting) does not take it and run rounds for `micro_batch_s`."""
        deadline = time.monotonic() + seconds
        with self.stop.batch_body(label) as may_run:
            if not may_run:
                return
            try:
                self._rounds_beside_lanes(deadline, seconds, until)
            except _RETRIED as exc:
                # Nothing was deleted that Kafka did not acknowledge; rows stay, locks expire.
                # Any other error fails the query, and the run's exit code says which.
                report_failure(self._metrics, "main", f"{label} gave up", exc)
                time.sleep(RETRY_PAUSE_S)
            except BaseException as exc:
                # A drain lane's own failure was reported by that lane.
                if not any(exc is lane.failure for lane in self._drains):
                    report_failure(self._metrics, "main", f"{label} failed", exc)
                self.failure = exc
                self.stop.abort(f"{label} failed")
                raise
            finally:
                log.debug("%s: rounds end", label)

    def _rounds_beside_lanes(self, deadline: float, seconds: float,
                             until: Callable[[], bool] | None) -> None:
        if seconds > 0:
            for lane in self._drains:
                lane.start(deadline, self.bound)
        try:
            self._rounds(deadline, until)
        except BaseException as exc:
            self._end_drains((time.monotonic(), exc))
            raise
        self._end_drains(None)

    def bound_every_round(self) -> None:
        """Available-now: from now on even a body's first round takes only rows up to
        `bound`, as the rounds of the slices after a run's first do (stream.before_spark)."""
        self._bound_first = True

    def _rounds(self, deadline: float, until: Callable[[], bool] | None) -> None:
        rounds = 0
        while True:
            began = time.monotonic()
            worked = self.run_once(self.bound if rounds or self._bound_first else None)
            rounds += 1
            if self._drains:
                self._hand_over(self.backlogged)
                if any(lane.failure is not None for lane in self._drains):
                    return
            if self.stop.requested or time.monotonic() >= deadline:
                return
            if not worked and not self._idle_poll(deadline):
                return
            if worked and self.make_way():
                return
            if worked and not self.backlogged and self._pace(began, deadline):
                return
            if until is not None and until():  # after the pause: it may have come meanwhile
                return

    def _hand_over(self, topics: Collection[str]) -> None:
        hand_over(self._drains, topics)

    def _held(self) -> frozenset[str]:
        """The topics the drain lanes hold."""
        return frozenset().union(*(lane.split.draining for lane in self._drains))

    def _end_drains(self, main: tuple[float, BaseException] | None) -> None:
        end_lanes(self._drains, main, self._metrics, retried=_RETRIED)

    def _pace(self, began: float, deadline: float) -> bool:
        """After a round whose claims all fell short of their limit (a trickle, not a
        backlog): the next round starts one poll interval after this one began, not at
        once. Every round is a Spark job, whose cost hardly depends on its rows: under
        500 msg/s, back-to-back rounds ran 11.5 a second and took a core of CPU. A
        message then waits at most a poll interval before its round starts, as it does
        when the relay is idle. Returns whether a stop came meanwhile."""
        pause = min(began + self._settings.poll_interval_s, deadline) - time.monotonic()
        return pause > 0 and self.stop.wait(pause)

    def make_way(self) -> bool:
        """Between rounds no lock is held, but the next round would take every topic back
        at once: when other relays poll this outbox, pause a random part of a poll
        interval so that they get topics too (Spark's trigger used to leave that gap).
        Returns whether a stop came meanwhile."""
        if relays_polling(self._db) <= 1:
            return False
        return self.stop.wait(random.uniform(0, self._settings.poll_interval_s))

    def _idle_poll(self, deadline: float) -> bool:
        """After a round without work: whether to try another one. Continuous bodies wait
        one poll interval (woken early by a stop); available-now bodies end, unless the
        drain lane still works."""
        draining = any(lane.busy for lane in self._drains)
        if draining:
            self._show_progress()
        if not self.continuous and not draining:
            return False
        pause = min(self.poll_wait_s(), deadline - time.monotonic())
        return pause > 0 and not self.stop.wait(pause)

    @property
    def idle(self) -> bool:
        """Whether no round worked for a while: it polls at the idle interval."""
        return time.monotonic() - self._worked_at >= IDLE_AFTER_S

    def poll_wait_s(self) -> float:
        """How long to wait after a round without work before the next one: the idle
        interval once idle, else the poll interval."""
        settings = self._settings
        return max(settings.idle_poll_interval_s, settings.poll_interval_s) if self.idle else (
            settings.poll_interval_s)

    def idle_poll(self) -> IdlePoll:
        """This lane's outbox scan, for the idle watch to send in its place (unbounded:
        a continuous lane's), waking it on the topics its rounds would take."""
        return IdlePoll(self._db.config, pending_params(self._settings.lock_timeout_s),
                        self._filter, self.poll_wait_s())

    def close(self) -> None:
        """Closes this lane's round and its drain lanes' (their producers)."""
        self._round.close()
        for lane in self._drains:
            lane.close()

    def warm_up(self) -> None:
        """The main lane's data plane, planned and loaded before its first write."""
        self._round.warm_up()

    def when_backlogged(self, callback: Callable[[], None] | None) -> None:
        """`callback` is called once a claim of this lane stops at its limit (None: no
        longer)."""
        self._round.on_backlog = callback

    @property
    def backlogged(self) -> frozenset[str]:
        """The topics of the last round whose claims stopped at their limit."""
        return self._round.backlogged

    def draining(self) -> bool:
        """Whether a drain lane works (or did a moment ago, between two bodies), or the
        main lane's last finished round found a backlog, which a lane takes after the
        round in flight: the start-up round found the backlog before any body ran, the
        query's start and the first body's first round outlasted DRAIN_QUIET_S on busy
        cores, and the first copy began beside the drain (test_drain_lane.py)."""
        if not self._drains:
            return False
        return bool(self._found_backlog) or any(
            lane.split.held_within(DRAIN_QUIET_S) for lane in self._drains)

    def run_once(self, bound: int | None = None, only: Collection[str] | None = None) -> bool:
        """One round, on the ready topics (with rows up to `bound` when given; of `only`
        when given, else not the drain lane's); returns whether it locked any topic."""
        worked = self._round.run(self._ready(bound, only))
        self.last_worked = worked
        if worked:
            self._worked_at = time.monotonic()
        self._found_backlog = self.backlogged
        return worked

    def _ready(self, bound: int | None, only: Collection[str] | None) -> list[str]:
        if only is not None and bound is None:
            # The drain lane's topics had a full claim in their last round, and the lock
            # decides whether they are free (LOCK_TOPICS). The outbox's loose scan
            # (pending_topics) is skipped: near the end of a 500,000-row drain it ran for
            # seconds in every round (reports/performance-history.md, W5, stack samples) while
            # it probed forwards over the index entries of the rows the drain deleted; it probes
            # backwards now, and this saves its statement a round.
            return sorted(only)
        with self._scan:
            states = pending_topics(self._db, self._settings.lock_timeout_s, self._filter,
                                    bound)
        ready = ready_topics(states, bound)
        if only is not None:
            return [t for t in ready if t in only]
        if self._drains:
            held = self._held()
            return [t for t in ready if t not in held]
        return ready

    def _show_progress(self) -> None:
        if self.progress is not None:
            self.progress.update(self.stats.snapshot())
