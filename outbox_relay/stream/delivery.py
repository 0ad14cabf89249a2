"""Sends a batch's sessions by the two lanes of the data plane, and keeps what the
heartbeat reports about lost locks for both.

A topic's claim small enough for the driver (DirectSettings.fits) and not transformed
goes through the driver's producer (outbox_relay.stream.direct_lane), many topics to a
write; any other, and every one while the direct lane is off, through one Spark job on
the executors (outbox_relay.stream.spark_lane). Both write the same records and keep the
same invariants; what happens around the write (lock, claim, delete, ledger) is the
round's. Until Spark is up (`attach_spark`), only the direct lane writes, and each claim
is capped at what it takes; when backlogs are the driver's too (relay.backlog_lane), so
it stays once Spark is up.
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

    @property
    def backlogs_to_spark(self) -> bool:
        """Whether a claim cut at its limit (a backlog) is for Spark's executors, so that
        meeting one asks for the session; else the driver's producer sends backlogs too."""
        return self._direct is None or not self._direct.settings.backlogs

    def claim_limits(self, rows: int, size: int) -> tuple[int, int]:
        """A claim's per-topic row and byte limits: the profile's `rows` and `size`, or,
        while only the driver sends (no Spark yet, or backlogs are the driver's too), at
        most what the direct lane takes."""
        if self._direct is None or (self._spark is not None and self.backlogs_to_spark):
            return rows, size
        settings = self._direct.settings
        return min(rows, settings.max_rows), min(size, settings.max_bytes)

    def sendable(self, topic: str) -> bool:
        """Whether a lane can send `topic` now: a transformed topic's records are made on
        the executors (outbox_relay.data.transform), so it waits for Spark."""
        return self._spark is not None or (self._direct is not None
                                           and not self._transformed(topic))

    def lanes(self, sessions: list[Claim]) -> tuple[list[Claim], list[Claim]]:
        """`sessions` split into the driver's producer's and Spark's."""
        direct = self._direct
        if direct is None:
            return [], list(sessions)
        driver = [not self._transformed(c.topic)
                  and (self._spark is None or direct.settings.fits(c)) for c in sessions]
        return ([c for c, d in zip(sessions, driver, strict=True) if d],
                [c for c, d in zip(sessions, driver, strict=True) if not d])

    def deliver(self, batch_id: int, sessions: list[Claim]) -> Outcome:
        """The driver's writes, then Spark's, then the search for what failed. Topics
        whose lock is lost are dropped: not sent again, not isolated, neither
        acknowledged nor errored (the new owner has them)."""
        try:
            direct, spark = self.lanes(sessions)
            outcome = Outcome()
            if direct:
                assert self._direct is not None
                _merge(outcome, self._direct.deliver(batch_id, direct))
            if spark:
                if self._spark is None:
                    raise RuntimeError("a claim the direct lane cannot take before Spark is up")
                _merge(outcome, self._spark.deliver(batch_id, spark, whole=not direct))
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


def _merge(into: Outcome, part: Outcome) -> None:
    into.acknowledged += part.acknowledged
    into.errors.update(part.errors)
    into.parked.update(part.parked)
    into.lanes.update(part.lanes)

