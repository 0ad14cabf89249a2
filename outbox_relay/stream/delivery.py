"""Sends a batch's sessions by one of the two lanes of the data plane, and keeps what
the heartbeat reports about lost locks for both.

A batch small enough for the driver (DirectSettings.takes) and without a transformed
topic goes through the driver's producer (outbox_relay.stream.direct_lane); anything else,
and everything while the direct lane is off, through a Spark job on the executors
(outbox_relay.stream.spark_lane). Both write the same records and keep the same
invariants; what happens around the write (lock, claim, delete, ledger) is the round's.
Until Spark is up (`attach_spark`), only the direct lane writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from outbox_relay.control.claims import Claim
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.stream.direct_lane import DirectLane
from outbox_relay.stream.failures import failure_kind
from outbox_relay.stream.settle import Outcome
from outbox_relay.stream.spark_lane import SparkLane

log = logging.getLogger(__name__)

__all__ = ["Delivery", "Outcome"]


class Delivery:
    def __init__(self, metrics: RuntimeMetrics, *, direct: DirectLane | None,
                 transformed: Callable[[str], bool]) -> None:
        self._metrics = metrics
        self._direct = direct
        self._transformed = transformed
        self._spark: SparkLane | None = None
        self._guard = threading.Lock()
        self._lost: set[str] = set()

    def attach_spark(self, lane: SparkLane) -> None:
        self._spark = lane

    @property
    def spark_lane(self) -> SparkLane | None:
        return self._spark

    def lost_now(self) -> frozenset[str]:
        with self._guard:
            return frozenset(self._lost)

    def lock_lost(self, topics: set[str]) -> None:
        """Thread-safe: `topics` are no longer ours. Nothing more is sent for them in
        this batch, and a Spark write in flight is cancelled if it holds any of them."""
        with self._guard:
            self._lost |= topics
        if self._spark is not None:
            self._spark.cancel_for(topics)

    def new_batch(self) -> None:
        """A loss the heartbeat reported after the last deliver() returned belongs to that
        batch, whose finish has fenced it already: it must not drop the topic again."""
        with self._guard:
            self._lost.clear()

    def claim_limits(self, topics: int, rows: int, size: int) -> tuple[int, int]:
        """A claim's per-topic row and byte limits: the profile's `rows` and `size`, or,
        while only the driver sends (no Spark yet), the direct lane's, shared by the
        round's `topics`: what it claims, it sends."""
        if self._spark is not None or self._direct is None:
            return rows, size
        settings, n = self._direct.settings, max(1, topics)
        return (min(rows, max(1, settings.max_rows // n)),
                min(size, max(1024, settings.max_bytes // n)))

    def sendable(self, topic: str) -> bool:
        """Whether a lane can send `topic` now: a transformed topic's records are made on
        the executors (outbox_relay.data.transform), so it waits for Spark."""
        return self._spark is not None or (self._direct is not None
                                           and not self._transformed(topic))

    def direct_takes(self, sessions: list[Claim]) -> bool:
        """Whether the driver's producer sends a batch of `sessions`."""
        direct = self._direct
        if direct is None or any(self._transformed(c.topic) for c in sessions):
            return False
        return self._spark is None or direct.settings.takes(sessions)

    def deliver(self, batch_id: int, sessions: list[Claim]) -> Outcome:
        """One write for every session, then the search for what failed. Topics whose lock
        is lost are dropped: not sent again, not isolated, neither acknowledged nor errored
        (the new owner has them)."""
        try:
            if self.direct_takes(sessions):
                assert self._direct is not None
                outcome = self._direct.deliver(batch_id, sessions)
                outcome.lane = "direct"
            elif self._spark is not None:
                outcome = self._spark.deliver(batch_id, sessions)
                outcome.lane = "spark"
            else:
                raise RuntimeError("a batch the direct lane cannot take before Spark is up")
            lost = self.lost_now()
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

    def warm_up(self) -> None:
        if self._spark is not None:
            self._spark.warm_up()

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
