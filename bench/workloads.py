"""The four workloads, each run against every contender in the same run.

Contenders: the relay (spark-submit, as the product runs), optionally the relay with
the bench's proposals applied, the peer (Deimos v2, deletes in groups of 10), the
peer deleting once per batch, and the two limits. Each gets a fresh database and
fresh topics; backlogs are inserted before it starts and are not measured.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import limits, startstop
from bench.backlog import Backlog, load
from bench.cpu import CpuMeter
from bench.env import BenchEnv, LockWatch, OffsetWatch, outbox_count, wait_empty
from bench.horizon import HeldHorizon
from bench.latency import LatencyConsumer, Load, generate, percentiles, read_generated
from bench.relay_proc import RelayProcess, launch
from relay.config import Config

REPO = Path(__file__).resolve().parents[1]
HOOKS = Path(__file__).resolve().parent / "hooks"

RELAY = "relay"
RELAY_PROPOSED = "relay+proposals"
PEER = "peer"
PEER_BATCH = "peer, one delete per batch"
PG_LIMIT = "PostgreSQL limit"
KAFKA_LIMIT = "Kafka limit"
PIPELINE_LIMIT = "pipeline limit (COPY, produce, one delete)"
FLOOR_PROBE = "floor probe (10 rows, JDBC to the Kafka sink)"
FLOOR_RUNS = 100
# Issue 10: the peer's held-horizon runs stop here and are reported as capped.
PEER_HELD_CAP_S = 15 * 60


@dataclass(frozen=True)
class Scale:
    quick: bool

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


W1_TOPICS, W1_KEYS, W1_PARTITIONS = 10, 10_000, 4
W2_RATE, W2_TX, W2_TOPICS, W2_KEYS, W2_PARTITIONS, W2_WARMUP_S = 1000, 10, 10, 1000, 4, 20.0
W3_PER_TOPIC, W3_KEYS, W3_PARTITIONS = 100, 10_000, 1
HEAP = "2g"

# Per-workload relay settings: they belong in the profile, as an operator would set them.
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "W1": {
        "relay": {"batch_size": 25_000, "read_partitions": 2},
        "kafka": {"linger_ms": 5, "batch_size": 262_144, "compression_type": "lz4"},
        "ledger": {"flush_interval_s": 30},
    },
    "W2": {
        "relay": {"batch_size": 2_000, "read_partitions": 1, "poll_interval_s": 0.05},
        "kafka": {"linger_ms": 0, "batch_size": 262_144, "compression_type": "lz4"},
        "ledger": {"flush_interval_s": 30},
    },
    "W3": {
        "relay": {"batch_size": 1_000, "read_partitions": 2},
        # 1,000 partitions: the Java producer takes a whole batch.size from its 32 MB pool
        # for every partition it holds a batch for, so 256 KB batches would block on memory.
        "kafka": {"linger_ms": 5, "batch_size": 32_768, "compression_type": "lz4"},
        "ledger": {"flush_interval_s": 30},
    },
    "W4": {
        "relay": {"batch_size": 25_000, "read_partitions": 2},
        "kafka": {"linger_ms": 5, "batch_size": 262_144, "compression_type": "lz4"},
        "ledger": {"flush_interval_s": 30},
    },
}
# The held-horizon runs use their workload's settings; start and stop, the trickle's.
PROFILES.update(W1H=PROFILES["W1"], W3H=PROFILES["W3"], STARTSTOP=PROFILES["W2"])


@dataclass
class Outcome:
    """One contender on one workload."""

    contender: str
    rows: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

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
def _horizon(url: str, held: bool) -> Iterator[HeldHorizon | None]:
    if not held:
        yield None
        return
    with HeldHorizon(url) as horizon:
        yield horizon


def _in_repo(path: Path) -> str:
    """A path as the report records it: relative to the checkout, never this machine's."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _sys_load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _relay_env(proposals: bool) -> dict[str, str]:
    if not proposals:
        return {}
    path = f"{HOOKS}{os.pathsep}{REPO}"
    return {"BENCH_PROPOSALS": "1", "PYTHONPATH": path}


class Workloads:
    def __init__(self, env: BenchEnv, scale: Scale, proposals: bool) -> None:
        self.env = env
        self.scale = scale
        self.proposals = proposals

    # --- shared pieces ------------------------------------------------------------
    def _relay_variants(self) -> list[tuple[str, bool]]:
        variants = [(RELAY, False)]
        if self.proposals:
            variants.append((RELAY_PROPOSED, True))
        return variants

    def _config(self, workload: str, url: str, label: str, **more: dict[str, Any]) -> Config:
        sections = {k: dict(v) for k, v in PROFILES[workload].items()}
        for key, values in more.items():
            sections.setdefault(key, {}).update(values)
        return self.env.relay_config(url, label, **sections)

    def _drain_relay(
        self,
        workload: str,
        label: str,
        backlog: Backlog,
        partitions: int,
        proposals: bool,
        available_now_deadline_s: float = 60.0,
        held: bool = False,
    ) -> Outcome:
        env = self.env
        url = env.fresh_database(label)
        with _horizon(url, held) as horizon:
            seconds_load = load(url, backlog)
            config = self._config(
                workload, url, label, relay={"available_now_deadline_s": available_now_deadline_s}
            )
            watch = OffsetWatch(env.admin, backlog.topics, partitions).start()
            locks_watch = LockWatch(url).start()
            load_before = _sys_load()
            cpu = CpuMeter()
            proc = launch(
                config, env.run_dir(label), "--available-now", extra_env=_relay_env(proposals)
            )
            code = proc.wait(timeout_s=3600)
            cpu.stop()
            watch.stop()
            locks_watch.stop()
        outcome = self._drain_outcome(
            RELAY_PROPOSED if proposals else RELAY, backlog, watch, proc.launched_at,
            proc.exited_at or time.time(), url, locks_watch.first_lock_at,
        )
        outcome.extra.update(
            exit_code=code, load_s=round(seconds_load, 1), sysload_before=load_before,
            sysload_after=_sys_load(), **proc.summary(), log=_in_repo(proc.log),
            **cpu.to_json(backlog.rows),
        )
        if horizon is not None:
            outcome.extra["horizon"] = horizon.to_json()
        env.drop_database(url)
        return outcome

    def _drain_outcome(
        self, name: str, backlog: Backlog, watch: OffsetWatch, started: float, ended: float,
        url: str, first_lock: float | None,
    ) -> Outcome:
        """seconds: first lock (the first batch starts) to the last record in Kafka.

        Start-up (launch to first lock) and the end-to-end time are reported beside it.
        """
        first = watch.first_at()
        last = watch.last_change_at()
        delivered = watch.samples[-1][1] if watch.samples else 0
        begin = first_lock if first_lock is not None else started
        drain_s = (last - begin) if last else ended - started
        steady = backlog.rows / (last - first) if first and last and last > first else None
        return Outcome(
            contender=name,
            rows=backlog.rows,
            seconds=drain_s,
            extra={
                "startup_s": round(begin - started, 2),
                "end_to_end_s": round(ended - started, 2),
                "end_to_end_msgs_per_s": round(backlog.rows / (ended - started), 1),
                "first_record_after_s": round(first - started, 2) if first else None,
                "first_to_last_s": round(last - first, 2) if first and last else None,
                "steady_msgs_per_s": round(steady, 1) if steady else None,
                "kafka_records": delivered,
                "duplicates": max(0, delivered - backlog.rows),
                "outbox_left": outbox_count(url),
                "progress": _thin(watch.samples, started),
            },
        )

    def _drain_peer(self, label: str, backlog: Backlog, partitions: int, delete: str,
                    held: bool = False) -> Outcome:
        env = self.env
        url = env.fresh_database(label)
        run_dir = env.run_dir(label)
        capped = False
        with _horizon(url, held) as horizon:
            seconds_load = load(url, backlog)
            watch = OffsetWatch(env.admin, backlog.topics, partitions).start()
            locks_watch = LockWatch(url).start()
            load_before = _sys_load()
            cpu = CpuMeter()
            started = time.time()
            try:
                subprocess.run(
                    [sys.executable, "-m", "bench.peer", "--url", url, "--bootstrap",
                     env.stack.kafka_bootstrap, "--delete", delete, "--drain",
                     "--stats", str(run_dir / "peer.json")],
                    cwd=REPO, check=True, timeout=PEER_HELD_CAP_S if held else None,
                )
            except subprocess.TimeoutExpired:
                capped = True  # its figure is then an upper bound of its rate
            ended = time.time()
            cpu.stop()
            watch.stop()
            locks_watch.stop()
        name = PEER if delete == "groups" else PEER_BATCH
        outcome = self._drain_outcome(name, backlog, watch, started, ended, url,
                                      locks_watch.first_lock_at)
        outcome.extra.update(load_s=round(seconds_load, 1), sysload_before=load_before,
                             sysload_after=_sys_load(), capped_at_s=PEER_HELD_CAP_S if capped
                             else None, **cpu.to_json(backlog.rows))
        if not capped:
            stats = json.loads((run_dir / "peer.json").read_text())
            outcome.extra.update(phases_s={k: round(v, 2) for k, v in stats["seconds"].items()},
                                 batches=stats["batches"])
        if horizon is not None:
            outcome.extra["horizon"] = horizon.to_json()
        env.drop_database(url)
        return outcome

    def _limits(
        self, label: str, backlog: Backlog, partitions: int, workload: str
    ) -> list[Outcome]:
        env = self.env
        url = env.fresh_database(f"{label}-pg")
        load(url, backlog)
        pg = limits.postgres_limit(url)
        env.drop_database(url)
        pg_out = Outcome(PG_LIMIT, pg.rows, pg.seconds, {
            "read_s": round(pg.read_s, 2), "delete_s": round(pg.delete_s, 2),
            "bytes_read": pg.bytes_read,
        })
        topics = env.topic_names(f"{label}-kafka", len(backlog.topics))
        repeats = 2
        every = topics + [f"{t}.r{i}" for i in range(1, repeats) for t in topics]
        env.create_topics(every, partitions)
        kafka_backlog = Backlog(backlog.rows, tuple(topics), backlog.keys, backlog.payload_bytes)
        config = self._config(workload, "postgresql://unused@127.0.0.1/x", f"{label}-kafka")
        kafka = limits.kafka_limit(env.stack.kafka_bootstrap, kafka_backlog, config.kafka,
                                   repeats)
        records = env.end_offsets(topics, partitions)
        env.delete_topics(every)
        kafka_out = Outcome(KAFKA_LIMIT, kafka.rows, kafka.seconds,
                            {"kafka_records": records, "best_of": repeats})
        return [pg_out, kafka_out, self._pipeline_limit(label, backlog, partitions, config)]

    def _pipeline_limit(self, label: str, backlog: Backlog, partitions: int,
                        config: Config) -> Outcome:
        env = self.env
        url = env.fresh_database(f"{label}-pipe")
        topics = env.topic_names(f"{label}-pipe", len(backlog.topics))
        env.create_topics(topics, partitions)
        load(url, Backlog(backlog.rows, tuple(topics), backlog.keys, backlog.payload_bytes))
        pipe = limits.pipeline_limit(url, env.stack.kafka_bootstrap, config.kafka)
        records = env.end_offsets(topics, partitions)
        env.drop_database(url)
        env.delete_topics(topics)
        return Outcome(PIPELINE_LIMIT, pipe.rows, pipe.seconds, {
            "copy_and_produce_s": round(pipe.copy_and_produce_s, 2),
            "flush_s": round(pipe.flush_s, 2), "delete_s": round(pipe.delete_s, 2),
            "kafka_records": records,
        })

    def _drain_all(
        self, workload: str, rows: int, n_topics: int, keys: int, partitions: int,
        deadline_s: float = 60.0, held: bool = False,
    ) -> list[Outcome]:
        """Every contender on the same backlog; the limits too unless the horizon is held
        (a limit reads and deletes once, where a held horizon costs nothing)."""
        results: list[Outcome] = []

        def backlog_for(label: str) -> Backlog:
            topics = self.env.topic_names(label, n_topics)
            self.env.create_topics(topics, partitions)
            return Backlog(rows, tuple(topics), keys)

        def relay_run(proposals: bool) -> Callable[[str], Outcome]:
            return lambda label: self._drain_relay(
                workload, label, backlog_for(label), partitions, proposals, deadline_s, held
            )

        runs: list[tuple[str, Callable[[str], Outcome]]] = [
            (name, relay_run(proposals)) for name, proposals in self._relay_variants()
        ]
        runs.append((PEER, lambda label: self._drain_peer(
            label, backlog_for(label), partitions, "groups", held)))
        runs.append((PEER_BATCH, lambda label: self._drain_peer(
            label, backlog_for(label), partitions, "batch", held)))
        for i, (name, run) in enumerate(runs):
            label = f"{workload.lower()}-{i}"
            _log(f"{workload}: {name} on {rows} rows")
            outcome = run(label)
            _log(f"{workload}: {name}: {outcome.msgs_per_s:.0f} msg/s over {outcome.seconds:.1f} s "
                 f"of drain; start-up {outcome.extra.get('startup_s')} s; end to end "
                 f"{outcome.extra.get('end_to_end_msgs_per_s')} msg/s")
            results.append(outcome)
            self.env.delete_topics(self.env.topic_names(label, n_topics))
        if held:
            return results
        _log(f"{workload}: limits")
        limit_topics = tuple(self.env.topic_names(f"{workload}-lim", n_topics))
        limit_backlog = Backlog(rows, limit_topics, keys)
        for outcome in self._limits(f"{workload.lower()}-lim", limit_backlog, partitions, workload):
            _log(f"{workload}: {outcome.contender}: {outcome.msgs_per_s:.0f} msg/s")
            results.append(outcome)
        return results

    # --- W1 ------------------------------------------------------------------------
    def w1(self) -> list[Outcome]:
        return self._drain_all("W1", self.scale.w1_rows, W1_TOPICS, W1_KEYS, W1_PARTITIONS)

    def w1h(self) -> list[Outcome]:
        """W1 with the horizon held for the whole run (bench/horizon.py)."""
        return self._drain_all("W1H", self.scale.w1_rows, W1_TOPICS, W1_KEYS, W1_PARTITIONS,
                               held=True)

    # --- W3 ------------------------------------------------------------------------
    def w3(self, held: bool = False) -> list[Outcome]:
        n = self.scale.w3_topics
        outcomes = self._drain_all(
            "W3H" if held else "W3", n * W3_PER_TOPIC, n, W3_KEYS, W3_PARTITIONS,
            deadline_s=120, held=held,
        )
        for o in outcomes:
            o.extra["topics"] = n
            o.extra["ms_per_topic"] = round(1000 * o.seconds / n, 2)
        return outcomes

    def w3h(self) -> list[Outcome]:
        return self.w3(held=True)

    # --- start-up and stop -------------------------------------------------------------
    def startstop(self, runs: int = 3) -> list[Outcome]:
        def config_for(url: str, label: str) -> Config:
            return self._config("STARTSTOP", url, label)

        measured = [startstop.one_run(self.env, f"ss-{i}", config_for) for i in range(runs)]
        result = startstop.summary(measured)
        _log(f"start/stop: start-up {result['startup_s']}, stop {result['stop_s']}")
        return [Outcome(RELAY, 10 * runs, sum(r["startup_s"] for r in measured), result)]

    # --- W2 ------------------------------------------------------------------------
    def w2(self) -> list[Outcome]:
        results = []
        contenders: list[tuple[str, bool | None]] = [*self._relay_variants(), (PEER, None)]
        for i, (name, proposals) in enumerate(contenders):
            _log(f"W2: {name}, {W2_RATE} msg/s for {self.scale.w2_seconds:.0f} s")
            outcome = self._latency_run(f"w2-{i}", name, proposals)
            lat = outcome.extra["latency_s"]
            _log(f"W2: {name}: p50 {lat['p50']:.3f} s, p95 {lat['p95']:.3f} s, "
                 f"p99 {lat['p99']:.3f} s")
            results.append(outcome)
        _log(f"W2: {FLOOR_PROBE}, {FLOOR_RUNS} runs")
        results.append(self._floor_probe("w2-floor"))
        return results

    def _floor_probe(self, label: str) -> Outcome:
        """bench/floor.py under spark-submit: 10 rows over JDBC into the Kafka sink."""
        env = self.env
        url = env.fresh_database(label)
        topic = env.topic_names(label, 1)[0]
        env.create_topics([topic], 1)
        submit = Path(sys.executable).parent / "spark-submit"
        done = subprocess.run(
            [str(submit), str(REPO / "bench" / "floor.py"), "--url", url, "--bootstrap",
             env.stack.kafka_bootstrap, "--topic", topic, "--runs", str(FLOOR_RUNS)],
            cwd=REPO, capture_output=True, text=True, check=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
        )
        line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1]
        durations = json.loads(line)["durations_s"]
        env.drop_database(url)
        env.delete_topics([topic])
        return Outcome(FLOOR_PROBE, 10 * len(durations), sum(durations), {
            "latency_s": {k: round(v, 4) for k, v in percentiles(durations).items()},
            "runs": len(durations),
        })

    def _latency_run(self, label: str, name: str, proposals: bool | None) -> Outcome:
        env = self.env
        topics = env.topic_names(label, W2_TOPICS)
        env.create_topics(topics, W2_PARTITIONS)
        url = env.fresh_database(label)
        run_dir = env.run_dir(label)
        consumer = LatencyConsumer(env.stack.kafka_bootstrap, topics, W2_PARTITIONS,
                                   run_dir / "received.bin")
        consumer.start()
        relay_proc: RelayProcess | None = None
        peer: subprocess.Popen[bytes] | None = None
        if proposals is None:
            peer = subprocess.Popen(
                [sys.executable, "-m", "bench.peer", "--url", url, "--bootstrap",
                 env.stack.kafka_bootstrap, "--stats", str(run_dir / "peer.json")],
                cwd=REPO, start_new_session=True,
            )
        else:
            config = self._config("W2", url, label)
            relay_proc = launch(config, run_dir, extra_env=_relay_env(proposals))
        load = Load(W2_RATE, W2_TX, self.scale.w2_seconds, tuple(topics), W2_KEYS)
        try:
            # Start-up is not latency: wait for a first message through, then warm up.
            generate(url, Load(100, W2_TX, 0.1, tuple(topics), W2_KEYS), run_dir / "probe.bin",
                     start_seq=3 * 10**12)
            if not consumer.wait_for(10, 600):
                raise RuntimeError(f"W2 {name}: nothing arrived within 10 minutes")
            # The same load until the JVM is warm, then until its backlog is gone, so the
            # measured window starts in steady state.
            warm = Load(W2_RATE, W2_TX, W2_WARMUP_S, tuple(topics), W2_KEYS)
            generate(url, warm, run_dir / "warmup.bin", start_seq=2 * 10**12)
            caught_up = consumer.wait_for(10 + int(W2_WARMUP_S * W2_RATE), 300)
            load_before = _sys_load()
            started = time.time()
            n = generate(url, load, run_dir / "generated.bin")
            generated_for = time.time() - started
            expected = 10 + int(W2_WARMUP_S * W2_RATE) + n
            complete = consumer.wait_for(expected, 120)
        finally:
            if relay_proc is not None:
                relay_proc.terminate()
            if peer is not None:
                peer.terminate()
                peer.wait(60)
            consumer.stop()
        generated = read_generated(run_dir / "generated.bin")
        receipts = consumer.receipts()
        latencies: dict[int, float] = {}
        duplicates = 0
        for seq, at in receipts:
            if seq in generated:
                if seq in latencies:
                    duplicates += 1
                    continue
                latencies[seq] = at - generated[seq]
        values = list(latencies.values())
        extra: dict[str, Any] = {
            "latency_s": {k: round(v, 4) for k, v in percentiles(values).items()},
            "received": len(latencies),
            "missing": len(generated) - len(latencies),
            "duplicates": duplicates,
            "complete": complete,
            "caught_up_after_warmup": caught_up,
            "generator_seconds": round(generated_for, 2),
            "achieved_rate": round(n / generated_for, 1),
            "sysload_before": load_before,
            "sysload_after": _sys_load(),
            "cdf": _cdf(values),
        }
        if relay_proc is not None:
            extra.update(relay_proc.summary(), log=_in_repo(relay_proc.log))
        env.drop_database(url)
        env.delete_topics(topics)
        return Outcome(name, n, generated_for, extra)

    # --- W4 ------------------------------------------------------------------------
    def w4(self) -> list[Outcome]:
        results = []
        for rows in self.scale.w4_rows:
            label = f"w4-{rows}"
            topics = self.env.topic_names(label, W1_TOPICS)
            self.env.create_topics(topics, W1_PARTITIONS)
            backlog = Backlog(rows, tuple(topics), W1_KEYS)
            _log(f"W4: relay on {rows} rows, driver heap {HEAP}")
            outcome = self._drain_relay("W4", label, backlog, W1_PARTITIONS, False)
            outcome.contender = f"relay, {rows:,} rows"
            _log(f"W4: {rows}: driver peak RSS {outcome.extra['driver_peak_rss_mb']} MB, "
                 f"heap after GC max {outcome.extra.get('heap_after_gc_max_mb')} MB, "
                 f"{outcome.msgs_per_s:.0f} msg/s")
            results.append(outcome)
            self.env.delete_topics(topics)
        return results


def _thin(samples: list[tuple[float, int]], t0: float, points: int = 200) -> list[list[float]]:
    """At most `points` (seconds since t0, delivered) pairs, for the progress plot."""
    step = max(1, len(samples) // points)
    picked = samples[::step]
    if samples and picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    return [[round(t - t0, 2), n] for t, n in picked]


def _cdf(values: list[float], points: int = 200) -> list[list[float]]:
    if not values:
        return []
    ordered = sorted(values)
    step = max(1, len(ordered) // points)
    out = [[round(v, 4), round((i + 1) / len(ordered), 4)] for i, v in
           enumerate(ordered) if i % step == 0]
    out.append([round(ordered[-1], 4), 1.0])
    return out


# --- profiling runs: where the time goes (not the benchmark's figures) -------------------
def _phase_stats(timings: dict[str, Any]) -> dict[str, dict[str, float]]:
    import statistics

    batches = timings["batches"]
    keys: list[str] = []
    for b in batches:
        keys += [k for k in b if k != "started_at" and k not in keys]
    out: dict[str, dict[str, float]] = {}
    for k in keys:
        vals = [b.get(k, 0.0) * 1000 for b in batches]
        out[k] = {"mean_ms": statistics.mean(vals), "p50_ms": statistics.median(vals),
                  "max_ms": max(vals), "calls": sum(1 for b in batches if k in b)}
    gaps = [(b2["started_at"] - b1["started_at"] - b1["foreachBatch"]) * 1000
            for b1, b2 in itertools.pairwise(batches)]
    if gaps:
        out["between foreachBatch calls (Spark)"] = {
            "mean_ms": statistics.mean(gaps), "p50_ms": statistics.median(gaps),
            "max_ms": max(gaps), "calls": len(gaps)}
    progress = [p["durationMs"] for p in timings["progress"] if "addBatch" in p["durationMs"]]
    for k in ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
              "triggerExecution"):
        vals = [float(p.get(k, 0)) for p in progress]
        if vals:
            out[f"Spark progress: {k}"] = {"mean_ms": statistics.mean(vals),
                                           "p50_ms": statistics.median(vals),
                                           "max_ms": max(vals), "calls": len(vals)}
    if "ledger flush" in timings["totals"]:
        n = timings["counts"]["ledger flush"]
        total = timings["totals"]["ledger flush"] * 1000
        out["ledger flush (own thread, per call)"] = {
            "mean_ms": total / n, "p50_ms": total / n, "max_ms": total / n, "calls": n}
    return out


class Profiles:
    """In-process relay runs with timers (bench/profile.py) and EXPLAIN capture."""

    def __init__(self, env: BenchEnv, scale: Scale) -> None:
        self.env = env
        self.scale = scale

    def _start(self, label: str, config: Config, args: list[str],
               proposals: bool) -> tuple[subprocess.Popen[bytes], Path]:
        from tests.integration.process import write_profile

        run_dir = self.env.run_dir(label)
        profile = write_profile(config, run_dir / "profile.toml")
        out = run_dir / "timings.json"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        child_env.update(_relay_env(proposals))
        with open(run_dir / "profile.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.profile", "--config", str(profile),
                 "--out", str(out), *args],
                cwd=REPO, env=child_env, stdout=log, stderr=subprocess.STDOUT,
            )
        return proc, out

    def latency(self, proposals: bool, label: str | None = None,
                **overrides: dict[str, Any]) -> dict[str, Any]:
        """Continuous relay under W2's load: per-micro-batch breakdown."""
        label = label or f"prof-w2-{int(proposals)}"
        env = self.env
        topics = env.topic_names(label, W2_TOPICS)
        env.create_topics(topics, W2_PARTITIONS)
        url = env.fresh_database(label)
        sections = {k: dict(v) for k, v in PROFILES["W2"].items()}
        for key, values in overrides.items():
            sections.setdefault(key, {}).update(values)
        config = env.relay_config(url, label, **sections)
        seconds = 20.0 if self.scale.quick else 40.0
        proc, out = self._start(label, config, [], proposals)
        run_dir = env.run_dir(label)
        try:
            generate(url, Load(100, W2_TX, 0.1, tuple(topics), W2_KEYS), run_dir / "probe.bin",
                     start_seq=3 * 10**12)
            wait_empty(url, 600)
            generate(url, Load(W2_RATE, W2_TX, seconds, tuple(topics), W2_KEYS),
                     run_dir / "generated.bin")
            wait_empty(url, 120)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
        result = json.loads(out.read_text())
        env.drop_database(url)
        env.delete_topics(topics)
        return {
            "description": f"Continuous relay, {W2_RATE} msg/s in transactions of {W2_TX} for "
                           f"{seconds:.0f} s, W2's profile"
                           + (", with the proposals applied." if proposals else "."),
            "batches": len(result["batches"]),
            "phases": _phase_stats(result),
        }

    def drain(self, explain: bool) -> dict[str, Any]:
        """A W1-shaped drain; with `explain`, every statement is EXPLAIN ANALYZEd."""
        label = f"prof-w1-{int(explain)}"
        env = self.env
        rows = self.scale.w1_rows
        topics = env.topic_names(label, W1_TOPICS)
        env.create_topics(topics, W1_PARTITIONS)
        url = env.fresh_database(label)
        load(url, Backlog(rows, tuple(topics), W1_KEYS))
        config = env.relay_config(url, label, **{k: dict(v) for k, v in PROFILES["W1"].items()})
        args = ["--available-now"]
        explain_file = env.run_dir(label) / "explain.json"
        if explain:
            args += ["--explain", str(explain_file)]
        proc, out_file = self._start(label, config, args, False)
        if proc.wait(3600) != 0:
            raise RuntimeError(f"profile run {label} failed: see its profile.log")
        timings = json.loads(out_file.read_text())
        env.drop_database(url)
        env.delete_topics(topics)
        batches = timings["batches"]
        startup = {
            "SparkSession built (s)": round(timings["session_s"], 2),
            "relay wiring built (s)": round(timings.get("build_relay_s", 0.0), 2),
            "query start to first micro-batch body (s)": round(
                batches[0]["started_at"] - timings["run_started_at"], 2) if batches and
            "run_started_at" in timings else None,
            "first micro-batch body (s)": round(batches[0]["foreachBatch"], 2)
            if batches else None,
        }
        out: dict[str, Any] = {
            "startup": startup,
            "description": f"Drain of {rows:,} rows (W1's shape and profile), in-process"
                           + (", every statement explained first (so slower)." if explain
                              else "."),
            "batches": len(timings["batches"]),
            "phases": _phase_stats(timings),
        }
        if explain:
            out["statements"] = json.loads(explain_file.read_text())
        return out
