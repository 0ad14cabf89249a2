"""One round of the seed's algorithm, for every ready topic of a lane at once.

Lock → validate → park what can never be sent (park policy) → claim → one JDBC read and
Kafka write for all topics → delete and stage the ledger in one transaction → release,
or register the error with backoff. The heartbeat renews the locks from the lock to the
delete.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from outbox_relay import failpoints
from outbox_relay.config import Config, TopicRule
from outbox_relay.control.claims import Claim, Claims, TopicLimits
from outbox_relay.control.finish import finish
from outbox_relay.control.locks import TopicLocks
from outbox_relay.control.parking import Parking
from outbox_relay.errors import RelayError, first_line
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.rules.outcomes import Outcome
from outbox_relay.rules.topic_rules import rule_for
from outbox_relay.stream.delivery import Delivery
from outbox_relay.stream.heartbeat import Heartbeat
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal
from outbox_relay.stream.topic_check import TopicCheck

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundSettings:
    """What a round reads of the profile."""

    batch_size: int
    max_batch_bytes: int
    heartbeat_interval_s: float
    topic_rules: list[TopicRule]

    @classmethod
    def of(cls, config: Config) -> RoundSettings:
        relay = config.relay
        return cls(relay.batch_size, relay.max_batch_bytes, relay.heartbeat_interval_s,
                   list(relay.topic_rules))


class Round:
    """Runs one lane's rounds, one at a time, under the token of its locks and claims."""

    def __init__(self, spark: SparkSession | None, delivery: Delivery, topics: TopicCheck, *,
                 locks: TopicLocks, heartbeat_locks: TopicLocks, claims: Claims,
                 parking: Parking, metrics: RuntimeMetrics, settings: RoundSettings,
                 stop: StopSignal, stats: RelayStats, finished: Callable[[], None]) -> None:
        self._spark = spark
        self._locks = locks
        self._heartbeat_locks = heartbeat_locks
        self._claims = claims
        self._parking = parking
        self._settings = settings
        self.stop = stop
        self.stats = stats
        self._finished = finished  # after each round that locked a topic
        self._delivery = delivery
        self._topics = topics
        self.metrics = metrics
        self._written_at = time.monotonic()  # when the last write of a round ended
        self._lanes: dict[str, str] = {}  # which lane wrote each topic of the last round
        # The topics of the last round whose claims stopped at their limit.
        self.backlogged: frozenset[str] = frozenset()
        # Called as soon as a claim stops at its limit, before the write (the runner
        # starts the query then: outbox_relay.stream.starting).
        self.on_backlog: Callable[[], None] | None = None

    def warm_up(self) -> None:
        self._delivery.warm_up()

    def close(self) -> None:
        """Lets the driver's producer send what it holds and end (its threads and
        sockets): a process may run several relays, one after the other."""
        self._delivery.close()

    def run(self, ready: list[str]) -> bool:
        """One round on `ready`; returns whether it locked any topic."""
        settings = self._settings
        self.backlogged = frozenset()
        if failpoints.take("round_db_error"):
            # Once the query's first batch body waits behind this round
            # (outbox_relay.stream.starting).
            failpoints.until(lambda: self.stop.body_waiting)
            failpoints.raise_db_error("round_db_error", self._locks.db.execute)
        # Before Spark is up a transformed topic waits: its records are made by Spark.
        ready = [t for t in ready if self._delivery.sendable(t)]
        if not ready:
            return False
        with self.metrics.phase("lock"):
            locked = self._locks.acquire(ready)
        if not locked:
            return False
        self.stats.add_batch()
        errors: dict[str, str] = {}
        acknowledged: list[Claim] = []
        self._delivery.new_batch()
        beat = Heartbeat(self._heartbeat_locks, locked, settings.heartbeat_interval_s,
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
            try:
                self._finish(locked, acknowledged, errors, beat.lost)
            except BaseException:
                self._after_failed_finish(locked, acknowledged)
                raise
        return True

    def _after_failed_finish(self, locked: Collection[str], acknowledged: list[Claim]) -> None:
        """The delete's transaction failed, so nothing of it committed. The locks go back at
        once, in a transaction of their own, so that no topic waits out the lock timeout
        after the run ends; what Kafka acknowledged stays in the outbox, is sent again, and
        the log names it (the ledger records it when the delete of that send commits)."""
        for claim in acknowledged:
            log.error("topic %s: Kafka acknowledged session %s but its delete failed: %s "
                      "stay in the outbox and will be sent again", claim.topic,
                      claim.session_id, self._ids_of(claim))
        try:
            self._locks.release(locked)
        except RelayError as exc:
            log.warning("could not release the locks of %s after the failed delete (they "
                        "expire after relay.lock_timeout_s): %s", sorted(locked),
                        first_line(exc))

    def _ids_of(self, claim: Claim) -> str:
        """The ids of an acknowledged session, as ranges, or its size if the database
        cannot say."""
        try:
            ids = self._claims.sent_ids(claim.session_id) if claim.session_id else []
        except RelayError:
            ids = []
        if not ids:
            return f"its {claim.rows} message(s)"
        return "ids " + _ranges(ids)


    def _policy(self, topic: str) -> str:
        return rule_for(self._settings.topic_rules, topic).policy

    def _park_doomed(
        self, limits: list[TopicLimits], doomed: dict[str, str], errors: dict[str, str]
    ) -> None:
        """Under the park policy, what can never be sent leaves the way of the rest;
        under block, its topic waits in error."""
        batch_size = self._settings.batch_size
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
            self._count(topic, Outcome.PARKED, n)
            log.warning("topic %s: parked %d message(s): %s", topic, n, reason)

    def _claim_and_send(
        self,
        limits: list[TopicLimits],
        errors: dict[str, str],
    ) -> list[Claim]:
        settings = self._settings
        limit, batch_bytes = self._delivery.claim_limits(settings.batch_size,
                                                         settings.max_batch_bytes)
        with self.metrics.phase("claim"):
            batch = self._claims.claim(limits, limit, batch_bytes)
        if (self.on_backlog is not None and self._delivery.backlogs_to_spark
                and any(c.more for c in batch.claims)):
            self.on_backlog()
        # What sessions that could not end withheld, settled by the claim before it claimed.
        for topic, n in batch.compacted.items():
            self._count(topic, Outcome.COMPACTED, n)
        for c in batch.claims:
            # Under park, the next round parks the bad row before claiming.
            if c.bad_id is not None and self._policy(c.topic) == "block":
                errors[c.topic] = f"message {c.bad_id}: {c.problem}"
        sessions = batch.sessions
        if not sessions or batch.batch_id is None:
            return []
        with self.metrics.phase("write"):
            outcome = self._delivery.deliver(batch.batch_id, sessions)
        self._written_at = time.monotonic()
        self._lanes = outcome.lanes
        errors.update(outcome.errors)
        for topic, n in outcome.parked.items():
            self._count(topic, Outcome.PARKED, n)
        failpoints.hit("after_ack")
        return outcome.acknowledged

    def _count(self, topic: str, outcome: Outcome, n: int) -> None:
        self.stats.add(topic, outcome, n)
        self.metrics.messages(topic, outcome, n)

    def _finish(self, locked: Collection[str], acknowledged: list[Claim],
                errors: dict[str, str], lost: Collection[str]) -> None:
        since_write = time.monotonic() - self._written_at if acknowledged else 0.0
        with self.metrics.phase("delete"):
            done = finish(self._claims, self._locks, locked, acknowledged, errors,
                          self.metrics.delivery_lag.bounds, since_write)
        for c in acknowledged:
            if c.topic in done.owned:
                self._count(c.topic, Outcome.PUBLISHED, c.rows)
                self.stats.add_lane(self._lanes.get(c.topic, ""), c.rows)
        for topic, n in done.compacted.items():
            self._count(topic, Outcome.COMPACTED, n)
        self.backlogged = frozenset(c.topic for c in acknowledged
                                    if c.more and c.topic in done.owned - errors.keys())
        self.metrics.delivery_lag.add(done.lag)
        self.metrics.lock_lost(len(done.lost | set(lost)))
        if done.published:
            self.metrics.succeeded()
        self._finished()
        if done.lost:
            log.warning("lock lost for %s before the delete: rows left to the new owner",
                        sorted(done.lost))
        for topic, reason in sorted(errors.items()):
            log.error("topic %s errored, backing off: %s", topic, reason)
        self.stats.note_errors(errors, cleared=done.owned - errors.keys())

    def _jvm_alive(self) -> bool:
        if self._spark is None:
            return True  # no session yet: the heartbeat watches the launcher alone
        try:
            jsc: Any = self._spark.sparkContext._jsc
            return not jsc.sc().isStopped()
        except Exception:
            return False


def _ranges(ids: Collection[int], most: int = 50) -> str:
    """Sorted ids as ranges (`1-3,7,9-12`), at most `most` of them: a session can hold
    20,000 ids, and the log names them all in a line."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    shown = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:most])
    return shown + (f",... ({len(runs) - most} more ranges)" if len(runs) > most else "")
