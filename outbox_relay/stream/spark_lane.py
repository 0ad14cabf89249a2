"""A batch's sessions in one Spark write (the executors' JDBC read and Kafka sink), and
the search for what failed when it fails: bisection over topics, then message isolation.

Each write runs under a Spark job tag of its own, so that a lock lost while it runs
(reported by the heartbeat thread, outbox_relay.stream.delivery) cancels it: a job tag,
unlike a job group, adds to the streaming query's own group instead of replacing it on
the foreachBatch thread, so stopping the query still cancels the write too.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Collection, Sequence

from pyspark.sql import SparkSession

from outbox_relay.config import KafkaConfig
from outbox_relay.control.claims import Claim
from outbox_relay.control.db import Database
from outbox_relay.control.kafka_admin import KafkaAdmin
from outbox_relay.data.plan import IdRange, RecordPlan
from outbox_relay.data.sink import batching_for, write_records
from outbox_relay.data.warm_up import warm_up
from outbox_relay.stream.failures import describe_failure, read_failed
from outbox_relay.stream.isolate import isolate
from outbox_relay.stream.settle import Outcome, Settlement, outage
from outbox_relay.stream.topic_bisect import bisect_topics, named_topics

log = logging.getLogger(__name__)

# How often a lost topic's write is cancelled again until it has ended.
_CANCEL_RETRY_S = 0.2


class SparkLane:
    """`lost()` names the topics whose lock the heartbeat found lost in this batch."""

    def __init__(self, spark: SparkSession, plan: RecordPlan, *, db: Database,
                 admin: KafkaAdmin, kafka: KafkaConfig, settlement: Settlement,
                 lost: Callable[[], Collection[str]]) -> None:
        self._spark = spark
        self._plan = plan
        self._db = db
        self._admin = admin
        self._kafka = kafka
        self._settlement = settlement
        self._lost = lost
        self._guard = threading.Lock()
        self._ended = threading.Condition(self._guard)  # notified when a write ends
        self._in_flight: tuple[str, frozenset[str]] | None = None  # (job tag, topics)
        self._named: set[str] = set()  # the topics the last failed write named
        # The batch's topics, if this lane sends them all; empty if the direct lane sends
        # some, whose rows the batch's read holds too.
        self._batch_topics: frozenset[str] = frozenset()
        self._sessions: list[Claim] = []  # the sessions of the batch being sent
        self._isolating: dict[str, list[int]] = {}  # topic -> its ids, while isolating

    @property
    def plan(self) -> RecordPlan:
        return self._plan

    def warm_up(self) -> None:
        """Plans the writes and loads what they run, sending nothing (outbox_relay.data.warm_up)."""
        warm_up(self._plan, self._kafka)

    def cancel_for(self, topics: set[str]) -> None:
        """Cancels the write in flight if it holds one of `topics` (whose lock was lost)."""
        with self._guard:
            flight = self._in_flight
        if flight is not None and flight[1] & topics:
            log.warning("lock lost for %s: cancelling the write in flight", sorted(topics))
            threading.Thread(target=self._cancel, args=(flight[0],), daemon=True,
                             name="relay-cancel-write").start()

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

    def deliver(self, batch_id: int, sessions: list[Claim], *, whole: bool = True) -> Outcome:
        """One write for every session; on failure, bisection over topics, then message by
        message. `whole`: `sessions` are all the batch's; otherwise (the direct lane sends
        the others) every write reads only their topics, since the batch's read holds
        the others' rows too."""
        topics = sorted(c.topic for c in sessions)
        self._batch_topics = frozenset(topics) if whole else frozenset()
        self._sessions, self._isolating = list(sessions), {}
        failure = self._try(topics)
        if failure is None:
            return Outcome(acknowledged=list(sessions), lanes=dict.fromkeys(topics, "spark"))
        log.warning("write of batch %d failed: %s", batch_id, failure)
        if read_failed(failure):
            # While PostgreSQL is down, the writes of a bisection would only fail again,
            # and once it is back they would send twice what the failed write delivered
            # (its tasks that had read everything went through). The round gives up
            # (DatabaseUnavailableError); its rows stay for the next claim. A read
            # failing for a reason of its own still goes to the bisection.
            self._db.check_reachable()
        if (down := outage(self._admin, failure)) is not None:
            return Outcome(errors=dict.fromkeys(topics, down))
        found = bisect_topics(
            topics, failure, lambda group: self._try(group), named=set(self._named),
            outage=lambda reason: outage(self._admin, reason), lost=self._lost,
        )
        if len(topics) > 1:
            log.warning("batch %d: %d write(s) to find the failing topics %s",
                        batch_id, found.attempts, sorted(found.failing))
        acknowledged = set(found.acknowledged)
        outcome = Outcome(acknowledged=[c for c in sessions if c.topic in acknowledged],
                          errors=dict(found.unavailable))
        outcome.lanes.update((c.topic, "spark") for c in sessions)
        for claim in sessions:
            if claim.topic in found.failing:
                ids = self._settlement.sent_ids(claim)
                self._isolating[claim.topic] = ids
                result = isolate(ids, found.failing[claim.topic],
                                 functools.partial(self._try_range, claim.topic))
                self._settlement.settle(claim, result, outcome)
        return outcome

    def _try_range(self, topic: str, first: int, last: int) -> str | None:
        return self._try([topic], (first, last))

    def _try(self, topics: Sequence[str], ids: IdRange | None = None) -> str | None:
        """One write of `topics` (those not lost); None when Kafka acknowledged it all."""
        tag = f"relay-write-{uuid.uuid4().hex}"
        lost = self._lost()
        with self._guard:
            live = [t for t in topics if t not in lost]
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
