"""The body of foreachBatch: the seed's algorithm for every ready topic at once.

lock → validate → claim → one JDBC read and Kafka write for all topics → delete and
stage the ledger in one transaction → release, or register the error with backoff.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from relay import failpoints
from relay.config import TopicRule
from relay.control.claims import Claim, TopicLimits, finish
from relay.control.kafka_admin import topic_name_problem
from relay.control.pending import TopicFilter, pending_topics
from relay.data.read import read_claimed
from relay.data.records import in_key_order, to_kafka_records
from relay.data.sink import write_records
from relay.errors import UnreachableError
from relay.stream.failures import describe_failure
from relay.stream.heartbeat import Heartbeat
from relay.stream.stop import StopSignal
from relay.wiring import Relay

log = logging.getLogger(__name__)


@dataclass
class RelayStats:
    published: Counter[str] = field(default_factory=Counter)
    compacted: Counter[str] = field(default_factory=Counter)
    errors: dict[str, str] = field(default_factory=dict)
    batches: int = 0


def rule_for(rules: list[TopicRule], topic: str) -> TopicRule:
    for rule in rules:
        if re.fullmatch(rule.match, topic):
            return rule
    return TopicRule(match=".*")


class BatchProcessor:
    def __init__(self, relay: Relay, stop: StopSignal) -> None:
        self.relay = relay
        self.stop = stop
        self.stats = RelayStats()
        self._filter = TopicFilter(
            relay.config.relay.include_topics, relay.config.relay.exclude_topics
        )
        self._partitions: dict[str, int] = {}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self.stop.between_batches():
            if not self.stop.requested:
                self.run_once()

    def run_once(self) -> None:
        settings = self.relay.config.relay
        states = pending_topics(self.relay.db, settings.lock_timeout_s, self._filter)
        locked = self.relay.locks.acquire([s.topic for s in states if s.state == "ready"])
        if not locked:
            return
        self.stats.batches += 1
        errors: dict[str, str] = {}
        acknowledged: list[Claim] = []
        try:
            limits, counts = self._validate(locked, errors)
            if limits and not self.stop.requested:
                acknowledged = self._claim_and_send(limits, counts, locked, errors)
        finally:
            self._finish(locked, acknowledged, errors)

    def _validate(
        self, locked: list[str], errors: dict[str, str]
    ) -> tuple[list[TopicLimits], dict[str, int]]:
        """What fails for certain is caught before anything is sent."""
        kafka = self.relay.config.kafka
        for topic in locked:
            problem = topic_name_problem(topic)
            if problem:
                errors[topic] = problem
        named = [t for t in locked if t not in errors]
        try:
            infos = self.relay.admin.describe(named) if named else {}
        except Exception as exc:
            reason = f"Kafka unavailable: {describe_failure(exc)}"
            errors.update({t: reason for t in named})
            return [], {}
        limits, counts = [], {}
        for topic in named:
            info = infos.get(topic)
            if info is None:
                errors[topic] = f"topic {topic!r} does not exist in Kafka"
                continue
            self._note_partitions(topic, info.partitions)
            counts[topic] = info.partitions
            max_bytes = min(info.max_message_bytes, kafka.max_request_size)
            rule = rule_for(self.relay.config.relay.topic_rules, topic)
            limits.append(TopicLimits(topic, max_bytes - kafka.record_overhead_bytes, rule.compact))
        return limits, counts

    def _note_partitions(self, topic: str, partitions: int) -> None:
        before = self._partitions.get(topic)
        if before is not None and before != partitions:
            log.warning(
                "topic %s went from %d to %d partitions: keys now map to other partitions, "
                "so a key's messages before and after this point may sit in two partitions",
                topic,
                before,
                partitions,
            )
        self._partitions[topic] = partitions

    def _claim_and_send(
        self,
        limits: list[TopicLimits],
        counts: dict[str, int],
        locked: list[str],
        errors: dict[str, str],
    ) -> list[Claim]:
        settings = self.relay.config.relay
        batch = self.relay.claims.claim(limits, settings.batch_size, settings.max_batch_bytes)
        for c in batch.claims:
            if c.bad_id is not None:
                errors[c.topic] = f"message {c.bad_id}: {c.problem}"
        sessions = batch.sessions
        if not sessions or batch.batch_id is None:
            return []
        with Heartbeat(
            self.relay.heartbeat_locks, locked, settings.heartbeat_interval_s, self._jvm_alive
        ):
            failed = self._deliver(batch.batch_id, sorted(c.topic for c in sessions), counts)
        errors.update(failed)
        failpoints.hit("after_ack")
        return [c for c in sessions if c.topic not in failed]

    def _deliver(self, batch_id: int, topics: list[str], counts: dict[str, int]) -> dict[str, str]:
        """Send every session in one write; on failure find the failing topics."""
        try:
            self._write(batch_id, counts, None)
            return {}
        except Exception as exc:
            reason = describe_failure(exc)
            log.warning("write of batch %d failed: %s", batch_id, reason)
        try:
            self.relay.admin.check_reachable()
        except UnreachableError as down:
            return {t: f"Kafka unavailable: {down}" for t in topics}
        if len(topics) == 1:
            return {topics[0]: reason}
        failed = {}
        for topic in topics:  # re-send topic by topic: healthy ones are delivered
            try:
                self._write(batch_id, counts, [topic])
            except Exception as exc:
                failed[topic] = describe_failure(exc)
        return failed

    def _write(self, batch_id: int, counts: dict[str, int], topics: list[str] | None) -> None:
        cfg = self.relay.config
        claimed = read_claimed(self.relay.spark, cfg.postgres, batch_id, cfg.relay.read_partitions)
        if topics is not None:
            claimed = claimed.where(F.col("topic").isin(topics))
        records = claimed.transform(in_key_order).transform(
            to_kafka_records,
            source_name=cfg.relay.source_name,
            header_prefix=cfg.relay.header_prefix,
            partitioner=cfg.relay.partitioner,
            partition_counts=counts,
        )
        write_records(records, cfg.kafka)

    def _finish(
        self, locked: Collection[str], acknowledged: list[Claim], errors: dict[str, str]
    ) -> None:
        done = finish(self.relay.claims, self.relay.locks, locked, acknowledged, errors)
        for c in acknowledged:
            if c.topic in done.owned:
                self.stats.published[c.topic] += c.rows - c.compacted
                self.stats.compacted[c.topic] += c.compacted
        if done.lost:
            log.warning(
                "lock lost for %s before the delete: rows left to the new owner", sorted(done.lost)
            )
        for topic, reason in sorted(errors.items()):
            log.error("topic %s errored, backing off: %s", topic, reason)
            self.stats.errors[topic] = reason
        for topic in done.owned - errors.keys():
            self.stats.errors.pop(topic, None)

    def _jvm_alive(self) -> bool:
        try:
            jsc: Any = self.relay.spark.sparkContext._jsc
            return not jsc.sc().isStopped()
        except Exception:
            return False
