"""Sends a batch's sessions in one Spark write, and finds what failed when it fails.

Each write runs under a Spark job tag of its own, so that a lock lost while it runs
(reported by the heartbeat thread through `lock_lost`) cancels it: a job tag, unlike a
job group, adds to the streaming query's own group instead of replacing it on the
foreachBatch thread, so stopping the query still cancels the write too.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pyspark.sql import SparkSession

from outbox_relay.config import KafkaConfig, TopicRule
from outbox_relay.control.claims import Claim, Claims
from outbox_relay.control.db import Database
from outbox_relay.control.kafka_admin import KafkaAdmin
from outbox_relay.control.parking import Parking
from outbox_relay.data.plan import IdRange, RecordPlan
from outbox_relay.data.sink import batching_for, write_records
from outbox_relay.data.warm_up import warm_up
from outbox_relay.errors import UnreachableError
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.rules.topic_rules import rule_for
from outbox_relay.stream.failures import OUTAGE_PREFIX, describe_failure, failure_kind, read_failed
from outbox_relay.stream.isolate import isolate
from outbox_relay.stream.topic_bisect import bisect_topics, named_topics

log = logging.getLogger(__name__)

# How often a lost topic's write is cancelled again until it has ended.
_CANCEL_RETRY_S = 0.2


@dataclass
class Outcome:
    acknowledged: list[Claim] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    parked: Counter[str] = field(default_factory=Counter)


class Delivery:
    def __init__(self, spark: SparkSession, plan: RecordPlan, *, db: Database,
                 admin: KafkaAdmin, claims: Claims, parking: Parking,
                 metrics: RuntimeMetrics, kafka: KafkaConfig,
                 topic_rules: list[TopicRule]) -> None:
        self._spark = spark
        self._db = db
        self._admin = admin
        self._claims = claims
        self._parking = parking
        self._metrics = metrics
        self._kafka = kafka
        self._topic_rules = topic_rules
        self._guard = threading.Lock()
        self._ended = threading.Condition(self._guard)  # notified when a write ends
        self._lost: set[str] = set()
        self._in_flight: tuple[str, frozenset[str]] | None = None  # (job tag, topics)
        self._named: set[str] = set()  # the topics the last failed write named
        self._plan = plan
        self._batch_topics: frozenset[str] = frozenset()  # those of the batch being sent
        self._sessions: list[Claim] = []  # the sessions of the batch being sent
        self._isolating: dict[str, list[int]] = {}  # topic -> its ids, while isolating

    def warm_up(self) -> None:
        """Plans the writes and loads what they run, sending nothing (outbox_relay.data.warm_up)."""
        warm_up(self._plan, self._kafka)

    def lock_lost(self, topics: set[str]) -> None:
        """Thread-safe: `topics` are no longer ours. Nothing more is sent for them in
        this batch, and the write in flight is cancelled if it holds any of them."""
        with self._guard:
            self._lost |= topics
            flight = self._in_flight
        if flight is not None and flight[1] & topics:
            log.warning("lock lost for %s: cancelling the write in flight", sorted(topics))
            threading.Thread(target=self._cancel, args=(flight[0],), daemon=True,
                             name="relay-cancel-write").start()

    def new_batch(self) -> None:
        """A loss the heartbeat reported after the last deliver() returned belongs to that
        batch, whose finish has fenced it already: it must not drop the topic again."""
        with self._guard:
            self._lost.clear()

    def _cancel(self, tag: str) -> None:
        """Cancels the write tagged `tag` until it has ended: Spark cancels only the jobs
        already submitted, and the write may not have submitted its job yet."""
        spark = self._spark.sparkContext
        while True:
            try:
                spark.cancelJobsWithTag(tag)
            except Exception as exc:  # the Spark application is gone: so is the write
                log.warning("could not cancel the write %s: %s", tag, exc)
                return
            with self._ended:
                if self._ended.wait_for(lambda: self._flying() != tag, _CANCEL_RETRY_S):
                    return

    def _flying(self) -> str | None:
        return self._in_flight[0] if self._in_flight is not None else None

    def _lost_now(self) -> frozenset[str]:
        with self._guard:
            return frozenset(self._lost)

    def deliver(self, batch_id: int, sessions: list[Claim]) -> Outcome:
        """One write for every session; on failure, bisection over topics, then message by
        message. Topics whose lock is lost are dropped: not sent again, not isolated,
        neither acknowledged nor errored (the new owner has them)."""
        try:
            outcome = self._deliver(batch_id, sessions)
            lost = self._lost_now()
            outcome.acknowledged = [c for c in outcome.acknowledged if c.topic not in lost]
            outcome.errors = {t: r for t, r in outcome.errors.items() if t not in lost}
            if lost & {c.topic for c in sessions}:
                log.warning("batch %d: dropped the topics whose lock was lost: %s",
                            batch_id, sorted(lost & {c.topic for c in sessions}))
            self._count_failures(outcome)
            return outcome
        finally:
            with self._guard:
                self._lost.clear()

    def _count_failures(self, outcome: Outcome) -> None:
        """One failure per topic and batch whose write was not acknowledged (a poison
        message parked counts as a record failure)."""
        metrics = self._metrics
        for topic, reason in outcome.errors.items():
            metrics.send_failure(topic, failure_kind(reason))
        for topic in outcome.parked.keys() - outcome.errors.keys():
            metrics.send_failure(topic, "record")

    def _deliver(self, batch_id: int, sessions: list[Claim]) -> Outcome:
        topics = sorted(c.topic for c in sessions)
        self._batch_topics = frozenset(topics)
        self._sessions, self._isolating = list(sessions), {}
        failure = self._try(topics)
        if failure is None:
            return Outcome(acknowledged=list(sessions))
        log.warning("write of batch %d failed: %s", batch_id, failure)
        if read_failed(failure):
            # While PostgreSQL is down, the writes of a bisection would only fail again,
            # and once it is back they would send twice what the failed write delivered
            # (its tasks that had read everything went through). The round gives up
            # (DatabaseUnavailableError); its rows stay for the next claim. A read
            # failing for a reason of its own still goes to the bisection.
            self._db.check_reachable()
        if (down := self._outage(failure)) is not None:
            return Outcome(errors=dict.fromkeys(topics, down))
        found = bisect_topics(
            topics, failure, lambda group: self._try(group),
            named=set(self._named), outage=self._outage, lost=self._lost_now,
        )
        if len(topics) > 1:
            log.warning("batch %d: %d write(s) to find the failing topics %s",
                        batch_id, found.attempts, sorted(found.failing))
        acknowledged = set(found.acknowledged)
        outcome = Outcome(acknowledged=[c for c in sessions if c.topic in acknowledged],
                          errors=dict(found.unavailable))
        for claim in sessions:
            if claim.topic in found.failing:
                self._isolate(batch_id, claim, found.failing[claim.topic], outcome)
        return outcome

    def _outage(self, reason: str) -> str | None:
        """Why Kafka counts as down after the write failure `reason`, if it is down."""
        try:
            self._admin.check_reachable()
        except UnreachableError as down:
            return f"{OUTAGE_PREFIX}{down}"
        return None

    def _isolate(self, batch_id: int, claim: Claim, reason: str, outcome: Outcome) -> None:
        assert claim.session_id is not None
        ids = self._claims.sent_ids(claim.session_id)
        self._isolating[claim.topic] = ids
        result = isolate(ids, reason, lambda a, b: self._try([claim.topic], (a, b)))
        # Only a culprit refused for good was certainly never appended: what the session
        # withholds behind it alone may still go (outbox_relay.control.withheld).
        culprit = result.culprit if result.poison else None
        if result.delivered or culprit is not None:
            freed = self._claims.isolated(claim.session_id, result.delivered, culprit)
            if freed:
                log.info("topic %s: %d withheld message(s) go again, their successor %s "
                         "never reached Kafka", claim.topic, freed, culprit)
        if result.delivered:
            outcome.acknowledged.append(replace(claim, rows=len(result.delivered)))
        if not result.poison or result.culprit is None:
            outcome.errors[claim.topic] = result.reason
            return
        rule = rule_for(self._topic_rules, claim.topic)
        where = f"message {result.culprit}: {result.reason} (found in {result.attempts} sends)"
        if rule.policy == "park":
            parked = self._parking.park_one(result.culprit, result.reason, result.attempts)
            outcome.parked[claim.topic] += len(parked)
            log.warning("topic %s: parked %s", claim.topic, where)
        else:
            outcome.errors[claim.topic] = where

    def _try(self, topics: Sequence[str], ids: IdRange | None = None) -> str | None:
        """One write of `topics` (those not lost); None when Kafka acknowledged it all."""
        tag = f"relay-write-{uuid.uuid4().hex}"
        with self._guard:
            live = [t for t in topics if t not in self._lost]
            self._in_flight = (tag, frozenset(live))
        if not live:
            return f"lock lost for {sorted(topics)}: nothing sent"
        spark = self._spark.sparkContext
        # Interrupted, a cancelled task stops producing at once instead of running on
        # (the streaming query sets the same on its thread; a plain caller may not).
        spark.setInterruptOnCancel(True)
        spark.addJobTag(tag)
        try:
            self._write(live, ids)
            return None
        except Exception as exc:  # any failed write: the caller decides what it means
            self._named = named_topics(str(exc), live)
            return describe_failure(exc)
        finally:
            spark.removeJobTag(tag)
            with self._ended:
                self._in_flight = None
                self._ended.notify_all()

    def _write(self, topics: list[str], ids: IdRange | None) -> None:
        whole = ids is None and frozenset(topics) == self._batch_topics
        sessions = [c for c in self._sessions if c.topic in topics]
        records = self._plan.records(topics, ids, whole=whole, rows=sum(c.rows for c in sessions))
        transformed = sorted(t for t in topics if self._plan.transform_of(t) is not None)
        if transformed:
            self._plan.counter.reset()
        kafka = batching_for(self._kafka, sum(c.partitions or 1 for c in sessions))
        write_records(self._plan.executable(records), kafka)
        if transformed:
            specs = sorted({f"{self._plan.transform_of(t)} ({t})" for t in transformed})
            self._plan.counter.verify(self._claimed_rows(transformed, ids),
                                      f"transform {', '.join(specs)}")

    def _claimed_rows(self, topics: list[str], ids: IdRange | None) -> int:
        """How many rows of `topics` the write of `ids` (all when None) holds."""
        total = 0
        for c in self._sessions:
            if c.topic not in topics:
                continue
            if ids is None:
                total += c.rows
            else:
                total += sum(ids[0] <= i <= ids[1] for i in self._isolating.get(c.topic, []))
        return total
