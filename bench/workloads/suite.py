"""The workloads by name, as ``python -m bench run --only`` knows them; each lives in its
own module of bench/workloads/ (drains in drain.py, latency in w2.py, w2c.py, w5.py,
soak.py, limits in limit_runs.py).

Contenders: the relay (spark-submit, as the product runs), the peer (Deimos v2, deletes
in groups of 10) and the peer deleting once per batch; they alternate, ``Scale.repeat`` runs each.
"""

from __future__ import annotations

from bench.backlog import Backlog
from bench.common import (
    DRIVER_MEMORY,
    RELAY,
    W1_KEYS,
    W1_PARTITIONS,
    W1_TOPICS,
    W3_KEYS,
    W3_PARTITIONS,
    W3_PER_TOPIC,
    Outcome,
    log,
)
from bench.context import Bench
from bench.workloads import startstop
from bench.workloads.drain import Drains
from bench.workloads.limit_runs import limit_outcomes
from bench.workloads.soak import soak
from bench.workloads.w2 import w2
from bench.workloads.w2c import w2c
from bench.workloads.w5 import w5
from outbox_relay.config import Config

__all__ = ["Workloads"]
W6_TOPICS, W6_KEYS, W6_PARTITIONS, W6_PAYLOAD = 10, 10_000, 4, 100


class Workloads:
    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.env = bench.env
        self.scale = bench.scale
        self.drains = Drains(bench)

    def _limits(self, workload: str, rows: int, n_topics: int, keys: int, partitions: int,
                payload_bytes: int = 1000) -> list[Outcome]:
        log(f"{workload}: limits")
        topics = tuple(self.env.topic_names(f"{workload}-lim", n_topics))
        out = limit_outcomes(self.bench, f"{workload.lower()}-lim",
                             Backlog(rows, topics, keys, payload_bytes), partitions, workload)
        for o in out:
            log(f"{workload}: {o.contender}: {o.msgs_per_s:.0f} msg/s")
        return out

    # --- the drains ----------------------------------------------------------------
    def w1(self) -> list[Outcome]:
        rows = self.scale.w1_rows
        out = self.drains.all("W1", rows, W1_TOPICS, W1_KEYS, W1_PARTITIONS)
        return out + self._limits("W1", rows, W1_TOPICS, W1_KEYS, W1_PARTITIONS)

    def w1h(self) -> list[Outcome]:
        """W1 with the horizon held for the whole run (bench/horizon.py)."""
        return self.drains.all("W1H", self.scale.w1_rows, W1_TOPICS, W1_KEYS, W1_PARTITIONS,
                               held=True)

    def w3(self, held: bool = False) -> list[Outcome]:
        n = self.scale.w3_topics
        name = "W3H" if held else "W3"
        out = self.drains.all(name, n * W3_PER_TOPIC, n, W3_KEYS, W3_PARTITIONS,
                              deadline_s=120, held=held)
        if not held:
            out += self._limits("W3", n * W3_PER_TOPIC, n, W3_KEYS, W3_PARTITIONS)
        for o in out:
            o.extra["topics"] = n
            o.extra["ms_per_topic"] = round(1000 * o.seconds / n, 2)
        return out

    def w3h(self) -> list[Outcome]:
        return self.w3(held=True)

    def w6(self) -> list[Outcome]:
        """1M x 100 B, every row with two user headers and a partition_key other than its
        key: the slow paths of the claim and the records."""
        out = self.drains.all("W6", self.scale.w6_rows, W6_TOPICS, W6_KEYS, W6_PARTITIONS,
                              headers=True, payload_bytes=W6_PAYLOAD)
        for o in out:
            o.extra["payload_bytes"] = W6_PAYLOAD
        return out

    def w4(self) -> list[Outcome]:
        """The relay's driver memory on two backlogs, 1M and 5M (one run each: the 5M
        drain is long, and memory peaks vary less than rates)."""
        results = []
        for rows in self.scale.w4_rows:
            label = f"w4-{rows}"
            topics = self.env.topic_names(label, W1_TOPICS)
            self.env.create_topics(topics, W1_PARTITIONS)
            backlog = Backlog(rows, tuple(topics), W1_KEYS)
            log(f"W4: relay on {rows} rows, driver heap {DRIVER_MEMORY}")

            def run(label: str, backlog: Backlog = backlog) -> Outcome:
                return self.drains.relay("W4", label, backlog, W1_PARTITIONS, False,
                                         live_set=True, heap_probe=True)

            try:
                outcome = self.bench.measured(run, label)
            finally:
                self.env.delete_topics(topics)
            outcome.contender = f"relay, {rows:,} rows"
            log(f"W4: {rows}: driver JVM peak RSS {outcome.extra['jvm_peak_rss_mb']} MB, "
                f"live set max {outcome.extra.get('heap_live_max_mb')} MB, retained max "
                f"{outcome.extra.get('heap_retained_max_mb')} MB")
            results.append(outcome)
        return results

    # --- under load ------------------------------------------------------------------
    def w2(self) -> list[Outcome]:
        return w2(self.bench)

    def w2c(self) -> list[Outcome]:
        return w2c(self.bench)

    def w5(self) -> list[Outcome]:
        return w5(self.bench)

    def soak(self) -> list[Outcome]:
        return soak(self.bench)

    # --- start-up and stop -----------------------------------------------------------
    def startstop(self) -> list[Outcome]:
        def config_for(url: str, label: str) -> Config:
            return self.bench.config("STARTSTOP", url, label)

        runs = max(3, self.scale.repeat)
        measured = [startstop.one_run(self.env, f"ss-{i}", config_for) for i in range(runs)]
        result = startstop.summary(measured)
        log(f"start/stop: start-up {result['startup_s']}, stop {result['stop_s']}")
        return [Outcome(RELAY, 10 * runs, sum(r["startup_s"] for r in measured), result)]
