"""What every workload module shares: the scale, the relay's per-workload profiles, the
contenders' names, one contender's outcome, and small helpers."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.horizon import HeldHorizon

REPO = Path(__file__).resolve().parents[1]

RELAY = "relay"
PEER = "peer"
PEER_BATCH = "peer, one delete per batch"
PG_LIMIT = "PostgreSQL limit"
KAFKA_LIMIT = "Kafka limit"
KAFKA_LIMIT_JAVA = "Kafka limit, Java ProducerPerformance"
PIPELINE_LIMIT = "pipeline limit (COPY, produce, one delete)"
SHAPE_LIMIT = "shape limit (the relay's JDBC read and Kafka sink, one batch)"
FLOOR_PROBE = "floor probe (10 rows, JDBC to the Kafka sink)"
RELAY_LEDGER_DEFERRED = "relay, ledger copy deferred past the run"
FLOOR_RUNS = 100
# Issue 10 caps the peer's held-horizon runs at 15 minutes; the time plan may lower it
# (bench/plan.py), and a capped run is reported as such either way.
PEER_HELD_CAP_S = 15 * 60


@dataclass(frozen=True)
class Scale:
    quick: bool
    repeat: int = 3

    @property
    def w1_rows(self) -> int:
        return 100_000 if self.quick else 1_000_000

    @property
    def w2_seconds(self) -> float:
        return 15.0 if self.quick else 60.0

    @property
    def w3_topics(self) -> int:
        return 100 if self.quick else 1000

    @property
    def w4_rows(self) -> tuple[int, int]:
        return (100_000, 500_000) if self.quick else (1_000_000, 5_000_000)

    @property
    def w5_backlog(self) -> int:
        return 50_000 if self.quick else 500_000

    @property
    def w6_rows(self) -> int:
        return 100_000 if self.quick else 1_000_000

    @property
    def soak_seconds(self) -> float:
        return 120.0 if self.quick else 20 * 60.0

    @property
    def w2c_rates(self) -> tuple[int, ...]:
        return (200, 1000, 2000, 5000)

    @property
    def w2c_seconds(self) -> float:
        return 10.0 if self.quick else 30.0


W1_TOPICS, W1_KEYS, W1_PARTITIONS = 10, 10_000, 4
W2_RATE, W2_TX, W2_TOPICS, W2_KEYS, W2_PARTITIONS, W2_WARMUP_S = 1000, 10, 10, 1000, 4, 20.0
W3_PER_TOPIC, W3_KEYS, W3_PARTITIONS = 100, 10_000, 1
# The relay's driver heap in every workload: Spark's own default, which is what a plain
# `spark-submit jobs/relay.py` (the README's launch) gives it. W4 holds it for both backlogs.
DRIVER_MEMORY = "1g"

# The relay's settings per workload: none. Every workload runs the shipped profile
# (conf/local.toml, bench.env.relay_config), as a user does; a workload sets addresses
# only (issue 37). The bench once tuned batch sizes, read splits, polls and producer
# batching per workload, and its figures were not what a user got.
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    w: {} for w in ("W1", "W1H", "W2", "W3", "W3H", "W4", "W5", "W6", "SOAK", "W2C",
                    "STARTSTOP")
}


@dataclass
class Outcome:
    """One run of one contender on one workload."""

    contender: str
    rows: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    # The measured window (epoch seconds), for the outside-CPU check (bench/probes/outside.py).
    window: tuple[float, float] | None = None

    @property
    def msgs_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "contender": self.contender,
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "msgs_per_s": round(self.msgs_per_s, 1),
            **self.extra,
        }


@contextlib.contextmanager
def horizon(url: str, held: bool) -> Iterator[HeldHorizon | None]:
    if not held:
        yield None
        return
    with HeldHorizon(url) as held_horizon:
        yield held_horizon


def in_repo(path: Path) -> str:
    """A path as the report records it: relative to the checkout, never this machine's."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sys_load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def thin(samples: list[tuple[float, int]], t0: float, points: int = 200) -> list[list[float]]:
    """At most `points` (seconds since t0, delivered) pairs, for the progress plot."""
    step = max(1, len(samples) // points)
    picked = samples[::step]
    if samples and picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    return [[round(t - t0, 2), n] for t, n in picked]


def cdf(values: list[float], points: int = 200) -> list[list[float]]:
    if not values:
        return []
    ordered = sorted(values)
    step = max(1, len(ordered) // points)
    out = [[round(v, 4), round((i + 1) / len(ordered), 4)] for i, v in
           enumerate(ordered) if i % step == 0]
    out.append([round(ordered[-1], 4), 1.0])
    return out
