"""The relay's runtime metrics: what the driver did, in a registry of its own.

Built by outbox_relay.wiring, served or pushed by outbox_relay.observe.serve. Nothing here connects
or registers anything at import time, and no value or label holds a secret: topics, the
source name and versions only.

Cost: one round updates a handful of counters and four phase observations (a few
microseconds, against a round of about 10 ms). The delivery lag is not observed row by
row: finish() counts the deleted rows per bucket in SQL (outbox_relay.control.claims), and
`DeliveryLag` adds those counts as they are.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from outbox_relay.config import MetricsConfig
from outbox_relay.observe import OTHER_TOPICS as OTHER_TOPICS  # re-exported: callers import it here
from outbox_relay.observe.labels import TopicLabels as TopicLabels  # re-exported likewise
from outbox_relay.rules.outcomes import Outcome

log = logging.getLogger(__name__)

PHASES = ("lock", "claim", "write", "delete")

# Seconds from created_at to the end of the write: a healthy relay is well under 1 s,
# a backlog drain reaches minutes, a stalled one hours.
LAG_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0,
)
PHASE_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class DeliveryLag(Collector):
    """A histogram fed with bucket counts computed elsewhere (in SQL), not with one
    observation per row. Bucket i counts lags in (bounds[i-1], bounds[i]], as
    Prometheus's `le` does; bucket len(bounds) is above the last bound."""

    NAME = "outbox_relay_delivery_lag_seconds"

    def __init__(self, bounds: Sequence[float] = LAG_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0
        self._guard = threading.Lock()

    def add(self, buckets: Iterable[tuple[int, int, float]]) -> None:
        """(bucket index, rows, sum of their lags in seconds) per bucket."""
        with self._guard:
            for index, rows, total in buckets:
                self._counts[min(max(index, 0), len(self.bounds))] += rows
                self._sum += total

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.NAME, self._doc())]

    def collect(self) -> Iterable[Metric]:
        with self._guard:
            counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), counts, strict=True):
            cumulative += n
            buckets.append((bound, cumulative))
        return [HistogramMetricFamily(self.NAME, self._doc(), buckets=buckets, sum_value=total)]

    @staticmethod
    def _doc() -> str:
        return "End of the batch's Kafka write minus each delivered row's created_at."


def _version_of(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


class RuntimeMetrics:
    """Everything the batch body reports. `registry` is where they live; another
    collector (the database-side gauges) may be registered into it at wiring time."""

    def __init__(self, config: MetricsConfig, source_name: str,
                 registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.registry = registry if registry is not None else CollectorRegistry()
        self.topic_label = TopicLabels(config.max_label_topics)
        r = self.registry
        self._messages = Counter(
            "outbox_relay_messages", "Messages that left the outbox, by outcome.",
            ("topic", "outcome"), registry=r)
        self._failures = Counter(
            "outbox_relay_send_failures", "Topics whose Kafka write failed in a batch, by "
            "kind (outage, timeout, topic, record, other).", ("topic", "kind"), registry=r)
        self._lane_failures = Counter(
            "outbox_relay_lane_failures", "Errors that ended a lane's rounds, by lane (main, "
            "drain) and kind (the exit code's name: database_lost, database_error, defect, "
            "...).", ("lane", "kind"), registry=r)
        self._lock_lost = Counter(
            "outbox_relay_lock_lost", "Topic locks found lost during a batch.", registry=r)
        self._last_success = Gauge(
            "outbox_relay_last_success_timestamp_seconds",
            "Unix time of the last batch that deleted what Kafka acknowledged (0: never).",
            registry=r)
        self._phases = Histogram(
            "outbox_relay_batch_phase_seconds", "Duration of each phase of a batch.",
            ("phase",), buckets=PHASE_BUCKETS, registry=r)
        self._phase = {p: self._phases.labels(phase=p) for p in PHASES}
        self.delivery_lag = DeliveryLag()
        r.register(self.delivery_lag)
        Info("outbox_relay_build", "The relay's build.", registry=r).info({
            "version": _version_of("outbox-relay"),
            "python_version": platform.python_version(),
            "pyspark_version": _version_of("pyspark"),
            "source": source_name,
        })

    def messages(self, topic: str, outcome: Outcome, n: int) -> None:
        if n:
            self._messages.labels(topic=self.topic_label(topic), outcome=outcome).inc(n)

    def send_failure(self, topic: str, kind: str) -> None:
        self._failures.labels(topic=self.topic_label(topic), kind=kind).inc()

    def lane_failure(self, lane: str, kind: str) -> None:
        self._lane_failures.labels(lane=lane, kind=kind).inc()

    def lock_lost(self, n: int) -> None:
        if n:
            self._lock_lost.inc(n)

    def succeeded(self, at: float | None = None) -> None:
        self._last_success.set(time.time() if at is None else at)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self._phase[name].observe(elapsed)
            log.debug("phase %s: %.3f s", name, elapsed)
