"""Sends a batch's sessions in one Spark write, and finds what failed when it fails."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field, replace

from pyspark.sql import functions as F

from relay.control.claims import Claim
from relay.control.parking import Parking
from relay.data.read import read_claimed
from relay.data.records import in_key_order, to_kafka_records
from relay.data.sink import write_records
from relay.errors import UnreachableError
from relay.stream.failures import describe_failure
from relay.stream.isolate import isolate
from relay.stream.policy import rule_for
from relay.wiring import Relay

log = logging.getLogger(__name__)

IdRange = tuple[int, int]


@dataclass
class Outcome:
    acknowledged: list[Claim] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    parked: Counter[str] = field(default_factory=Counter)


class Delivery:
    def __init__(self, relay: Relay, parking: Parking) -> None:
        self.relay = relay
        self.parking = parking
        self.lost: set[str] = set()

    def lock_lost(self, topics: set[str]) -> None:
        """Called from the heartbeat thread (minimal stand-in: records the topics)."""
        self.lost |= topics

    def deliver(self, batch_id: int, sessions: list[Claim], counts: dict[str, int]) -> Outcome:
        """One write for every session; on failure, topic by topic, then message by message."""
        failure = self._try(batch_id, counts, None)
        if failure is None:
            return Outcome(acknowledged=list(sessions))
        log.warning("write of batch %d failed: %s", batch_id, failure)
        topics = sorted(c.topic for c in sessions)
        try:
            self.relay.admin.check_reachable()
        except UnreachableError as down:
            return Outcome(errors={t: f"Kafka unavailable: {down}" for t in topics})
        failed = {topics[0]: failure} if len(topics) == 1 else {
            t: r for t in topics if (r := self._try(batch_id, counts, [t])) is not None
        }
        outcome = Outcome(acknowledged=[c for c in sessions if c.topic not in failed])
        for claim in sessions:
            if claim.topic in failed:
                self._isolate(batch_id, counts, claim, failed[claim.topic], outcome)
        return outcome

    def _isolate(self, batch_id: int, counts: dict[str, int], claim: Claim, reason: str,
                 outcome: Outcome) -> None:
        assert claim.session_id is not None
        ids = self.relay.claims.sent_ids(claim.session_id)
        result = isolate(
            ids, reason, lambda a, b: self._try(batch_id, counts, [claim.topic], (a, b))
        )
        if result.delivered:
            self.relay.claims.truncate(claim.session_id, result.delivered)
            outcome.acknowledged.append(replace(claim, rows=len(result.delivered), compacted=0))
        if not result.poison or result.culprit is None:
            outcome.errors[claim.topic] = result.reason
            return
        rule = rule_for(self.relay.config.relay.topic_rules, claim.topic)
        where = f"message {result.culprit}: {result.reason} (found in {result.attempts} sends)"
        if rule.policy == "park":
            parked = self.parking.park_one(result.culprit, result.reason, result.attempts)
            outcome.parked[claim.topic] += len(parked)
            log.warning("topic %s: parked %s", claim.topic, where)
        else:
            outcome.errors[claim.topic] = where

    def _try(self, batch_id: int, counts: dict[str, int], topics: list[str] | None,
             ids: IdRange | None = None) -> str | None:
        try:
            self._write(batch_id, counts, topics, ids)
            return None
        except Exception as exc:  # any failed write: the caller decides what it means
            return describe_failure(exc)

    def _write(self, batch_id: int, counts: dict[str, int], topics: list[str] | None,
               ids: IdRange | None) -> None:
        cfg = self.relay.config
        claimed = read_claimed(self.relay.spark, cfg.postgres, batch_id, cfg.relay.read_partitions)
        if topics is not None:
            claimed = claimed.where(F.col("topic").isin(topics))
        if ids is not None:
            claimed = claimed.where(F.col("id").between(ids[0], ids[1]))
        records = claimed.transform(in_key_order).transform(
            to_kafka_records,
            source_name=cfg.relay.source_name,
            header_prefix=cfg.relay.header_prefix,
            partitioner=cfg.relay.partitioner,
            partition_counts=counts,
        )
        write_records(records, cfg.kafka)
