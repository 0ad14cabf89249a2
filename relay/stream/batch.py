"""The body of foreachBatch: the seed's algorithm for every ready topic at once.

One round: lock → validate → park what can never be sent (park policy) → claim → one
JDBC read and Kafka write for all topics → delete and stage the ledger in one
transaction → release, or register the error with backoff. The heartbeat renews the
locks from the lock to the delete.

A body runs rounds for up to `relay.micro_batch_s`: Spark's own cost per trigger (offset
and commit logs, planning, about 1 s on 2 cores) is then paid once for many rounds
instead of once per round. Between rounds no lock is held and the stop flag is read, so
a stop still ends the body after the round in flight. Topics with a backlog run their
rounds in the drain lane beside these (relay.stream.lanes), for the length of the body.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Collection
from typing import Any

from pyspark.sql import DataFrame

from relay import failpoints
from relay.control.claims import Claim, TopicLimits
from relay.control.finish import finish
from relay.control.parking import Parking
from relay.control.pending import TopicFilter, pending_topics, relays_polling
from relay.errors import RETRY_PAUSE_S, DatabaseUnavailableError, UnreachableError
from relay.observe.progress import Progress
from relay.stream.delivery import Delivery
from relay.stream.heartbeat import Heartbeat
from relay.stream.lanes import DrainLane
from relay.stream.policy import rule_for
from relay.stream.stats import RelayStats
from relay.stream.stop import StopSignal
from relay.stream.topic_check import TopicCheck
from relay.wiring import Relay

log = logging.getLogger(__name__)


class BatchProcessor:
    def __init__(self, relay: Relay, stop: StopSignal, *, bound: int | None = None,
                 continuous: bool = False, stats: RelayStats | None = None) -> None:
        self.relay = relay
        self.stop = stop
        # Available-now: after a body's first round, only topics with rows up to `bound`
        # (what existed at the start) start another, so rows written during a drain
        # cannot keep a body running. The first round takes whatever is ready, as the
        # source (whose own bound is fixed a moment later) expects of every micro-batch.
        self.bound = bound
        # Continuous: an idle body keeps polling until its time is up, so a message
        # written then waits for one poll, not for Spark's next trigger.
        self.continuous = continuous
        self.stats = stats if stats is not None else RelayStats()
        settings = relay.config.relay
        self._filter = TopicFilter(settings.include_topics, settings.exclude_topics)
        self._parking = Parking(relay.db, relay.token, settings.lock_timeout_s,
                                settings.source_name, settings.header_prefix)
        self._delivery = Delivery(relay, self._parking)
        self._topics = TopicCheck(relay)
        self.metrics = relay.metrics
        self._written_at = time.monotonic()  # when the last write of a batch ended
        # Set by the runner for an available-now drain on a terminal.
        self.progress: Progress | None = None
        # The error that ended a batch body, if one did: the runner tells it apart from
        # what its own query.stop() makes Spark raise after the last body finished.
        self.failure: BaseException | None = None
        # The topics of the last round whose claims stopped at their limit.
        self.backlogged: frozenset[str] = frozenset()
        self._drain = None if relay.drain is None else DrainLane(
            BatchProcessor(relay.drain, stop, bound=bound, stats=self.stats), relay.spark, stop,
            settings.poll_interval_s)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.run_rounds(f"micro-batch {batch_id}", self.relay.config.relay.micro_batch_s)

    def run_rounds(self, label: str, seconds: float) -> None:
        """Rounds until `seconds` are up, the stop is requested, or (available-now)
        a round finds nothing to do; always at least one round."""
        deadline = time.monotonic() + seconds
        with self.stop.batch_body() as may_run:
            if not may_run:
                return
            try:
                if self._drain is not None and seconds > 0:
                    self._drain.start(deadline, self.bound)
                try:
                    self._rounds(deadline)
                finally:
                    if self._drain is not None:
                        self._drain.end()
            except (DatabaseUnavailableError, UnreachableError) as exc:
                # Nothing was deleted that Kafka did not acknowledge; rows stay, locks expire.
                # Any other error is a defect and fails the query loudly.
                log.error("%s gave up: %s", label, exc)
                time.sleep(RETRY_PAUSE_S)
            except BaseException as exc:
                self.failure = exc
                raise

    def _rounds(self, deadline: float) -> None:
        rounds = 0
        while True:
            worked = self.run_once(self.bound if rounds else None)
            rounds += 1
            if self._drain is not None:
                self._drain.split.hand_over(self.backlogged)
                if self._drain.failure is not None:
                    return
            if self.stop.requested or time.monotonic() >= deadline:
                return
            if not worked and not self._idle_poll(deadline):
                return
            if worked and self.make_way():
                return

    def make_way(self) -> bool:
        """Between rounds no lock is held, but the next round would take every topic back
        at once: when other relays poll this outbox, pause a random part of a poll
        interval so that they get topics too (Spark's trigger used to leave that gap).
        Returns whether a stop came meanwhile."""
        if relays_polling(self.relay.db) <= 1:
            return False
        return self.stop.wait(random.uniform(0, self.relay.config.relay.poll_interval_s))

    def _idle_poll(self, deadline: float) -> bool:
        """After a round without work: whether to try another one. Continuous bodies wait
        one poll interval (woken early by a stop); available-now bodies end, unless the
        drain lane still works."""
        draining = self._drain is not None and self._drain.busy
        if draining:
            self._show_progress()
        if not self.continuous and not draining:
            return False
        pause = min(self.relay.config.relay.poll_interval_s, deadline - time.monotonic())
        return pause > 0 and not self.stop.wait(pause)

    def _policy(self, topic: str) -> str:
        return rule_for(self.relay.config.relay.topic_rules, topic).policy

    def run_once(self, bound: int | None = None, only: Collection[str] | None = None) -> bool:
        """One round, on the ready topics (with rows up to `bound` when given; of `only`
        when given, else not the drain lane's); returns whether it locked any topic."""
        settings = self.relay.config.relay
        self.backlogged = frozenset()
        if only is not None and bound is None:
            # The drain lane's topics had a full claim in their last round, and the lock
            # decides whether they are free (LOCK_TOPICS). The outbox's loose scan
            # (pending_topics) is skipped: near the end of a 500,000-row drain it ran for
            # seconds in every round (bench/, W5, stack samples), most likely walking the
            # index entries of the rows the drain deleted.
            ready = sorted(only)
        else:
            states = pending_topics(self.relay.db, settings.lock_timeout_s, self._filter,
                                    bound)
            ready = [s.topic for s in states
                     if s.state == "ready" and (bound is None or s.below_bound)]
            if only is not None:
                ready = [t for t in ready if t in only]
            elif self._drain is not None:
                held = self._drain.split.draining
                ready = [t for t in ready if t not in held]
        if not ready:
            return False
        with self.metrics.phase("lock"):
            locked = self.relay.locks.acquire(ready)
        if not locked:
            return False
        self.stats.add_batch()
        errors: dict[str, str] = {}
        acknowledged: list[Claim] = []
        self._delivery.new_batch()
        beat = Heartbeat(self.relay.heartbeat_locks, locked, settings.heartbeat_interval_s,
                         self._jvm_alive, on_lost=self._delivery.lock_lost)
        try:
            with beat:
                limits, doomed = self._topics.validate(locked, errors)
                # A topic whose lock was lost gets no more work; the fenced SQL would
                # refuse it anyway.
                self._park_doomed([t for t in limits if t.topic not in beat.lost],
                                  {t: r for t, r in doomed.items() if t not in beat.lost}, errors)
                limits = [t for t in limits if t.topic not in beat.lost]
                if limits and not self.stop.requested:
                    acknowledged = self._claim_and_send(limits, errors)
        finally:
            # The heartbeat renewed up to here; finish's first statement row-locks the
            # topics still held, so nobody can take them over until it commits.
            self._finish(locked, acknowledged, errors, beat.lost)
        return True

    def _park_doomed(
        self, limits: list[TopicLimits], doomed: dict[str, str], errors: dict[str, str]
    ) -> None:
        """Under the park policy, what can never be sent leaves the way of the rest;
        under block, its topic waits in error."""
        batch_size = self.relay.config.relay.batch_size
        for topic, reason in doomed.items():
            if self._policy(topic) == "park":
                parked = self._parking.park_topic(topic, reason, batch_size)
                self._count_parked(topic, len(parked), reason)
            else:
                errors[topic] = reason
        park = [t for t in limits if self._policy(t.topic) == "park"]
        for p in self._parking.park_doomed(park, batch_size):
            self._count_parked(p.topic, 1, f"message {p.id}: {p.reason}")

    def _count_parked(self, topic: str, n: int, reason: str) -> None:
        if n:
            self._count(topic, "parked", n)
            log.warning("topic %s: parked %d message(s): %s", topic, n, reason)

    def _claim_and_send(
        self,
        limits: list[TopicLimits],
        errors: dict[str, str],
    ) -> list[Claim]:
        settings = self.relay.config.relay
        with self.metrics.phase("claim"):
            batch = self.relay.claims.claim(limits, settings.batch_size,
                                            settings.max_batch_bytes)
        for c in batch.claims:
            # Under park, the next batch parks the bad row before claiming.
            if c.bad_id is not None and self._policy(c.topic) == "block":
                errors[c.topic] = f"message {c.bad_id}: {c.problem}"
        sessions = batch.sessions
        if not sessions or batch.batch_id is None:
            return []
        with self.metrics.phase("write"):
            outcome = self._delivery.deliver(batch.batch_id, sessions)
        self._written_at = time.monotonic()
        errors.update(outcome.errors)
        for topic, n in outcome.parked.items():
            self._count(topic, "parked", n)
        failpoints.hit("after_ack")
        return outcome.acknowledged

    def _count(self, topic: str, outcome: str, n: int) -> None:
        self.stats.add(topic, outcome, n)
        self.metrics.messages(topic, outcome, n)

    def _show_progress(self) -> None:
        if self.progress is not None:
            self.progress.update(self.stats.snapshot())

    def _finish(self, locked: Collection[str], acknowledged: list[Claim],
                errors: dict[str, str], lost: Collection[str]) -> None:
        since_write = time.monotonic() - self._written_at if acknowledged else 0.0
        with self.metrics.phase("delete"):
            done = finish(self.relay.claims, self.relay.locks, locked, acknowledged, errors,
                          self.metrics.delivery_lag.bounds, since_write)
        for c in acknowledged:
            if c.topic in done.owned:
                self._count(c.topic, "published", c.rows - c.compacted)
                self._count(c.topic, "compacted", c.compacted)
        self.backlogged = frozenset(c.topic for c in acknowledged
                                    if c.more and c.topic in done.owned - errors.keys())
        self.metrics.delivery_lag.add(done.lag)
        self.metrics.lock_lost(len(done.lost | set(lost)))
        if done.published or done.compacted:
            self.metrics.succeeded()
        self._show_progress()
        if done.lost:
            log.warning("lock lost for %s before the delete: rows left to the new owner",
                        sorted(done.lost))
        for topic, reason in sorted(errors.items()):
            log.error("topic %s errored, backing off: %s", topic, reason)
        self.stats.note_errors(errors, cleared=done.owned - errors.keys())

    def _jvm_alive(self) -> bool:
        try:
            jsc: Any = self.relay.spark.sparkContext._jsc
            return not jsc.sc().isStopped()
        except Exception:
            return False
