"""SOAK: the relay at 2,000 msg/s for 20 minutes. p99 per minute, the first 5 minutes
against the last 5 (within 20%), and what must stay bounded, sampled every 15 s: the
Delta ledger's files (parquet files and _delta_log entries under the ledger's path) and
the queue table's size (pg_total_relation_size of kafka_messages). One run: 20 minutes
is a sixth of the benchmark, so the report marks it as fewer than 3 runs."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import RELAY, W2_KEYS, W2_PARTITIONS, W2_TOPICS, W2_TX, Outcome, log
from bench.context import Bench
from bench.env import scalar
from bench.workloads.latency import Load, generate, percentiles
from bench.workloads.steady import latency_extra, read_latencies, relay_summary, running

SOAK_RATE, SAMPLE_S, STEADY_SHARE = 2000, 15.0, 0.20


def ledger_files(path: Path) -> dict[str, int | None]:
    """The table's files (its snapshot, from the Delta log: what a reader opens, kept
    small by the relay's compaction), and what is on disk under `path`: parquet files
    (replaced ones too, until VACUUM) and _delta_log entries (commits and checkpoints,
    until the log's retention)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    logs = [p for p in path.rglob("*") if p.parent.name == "_delta_log" and p.is_file()]
    try:
        active: int | None = len(DeltaTable(str(path)).file_uris())
    except TableNotFoundError:
        active = None  # no copy yet
    return {"active_files": active,
            "parquet_files": sum(1 for _ in path.rglob("*.parquet")) - sum(
                1 for p in logs if p.suffix == ".parquet"),
            "delta_log_entries": len(logs)}


def jit_counters(pid: int | None) -> dict[str, float | None]:
    """The driver JVM's JIT so far (`jstat -compiler`): methods compiled and compile
    seconds. Their rate per minute shows when the JVM is warm, beside the latency's."""
    jstat = shutil.which("jstat")
    if pid is None or jstat is None:
        return {"jit_compiled": None, "jit_s": None}
    done = subprocess.run([jstat, "-compiler", str(pid)], capture_output=True, text=True,
                          timeout=30, check=False)
    rows = done.stdout.split("\n")
    if done.returncode != 0 or len(rows) < 2 or not rows[0].startswith("Compiled"):
        return {"jit_compiled": None, "jit_s": None}
    # "Compiled Failed Invalid Time FailedType FailedMethod"
    fields = rows[1].split()
    return {"jit_compiled": int(fields[0]), "jit_s": float(fields[3])}


def queue_bytes(url: str) -> int:
    return scalar(url, "SELECT pg_total_relation_size('kafka_messages')")


def per_minute_p99(created: dict[int, float], lat: dict[int, float], t0: float,
                   minute_s: float = 60.0, end: float | None = None) -> list[float]:
    """p99 of the messages created in each whole minute (by created_at) from t0 to `end`.

    A minute cut by `end` is left out: the few messages generated in the last instant of
    a run made a "minute" of their own (p99 0.07 s in the soak at d4a8916), which counted
    among the last five.
    """
    buckets: dict[int, list[float]] = {}
    for seq, value in lat.items():
        buckets.setdefault(int((created[seq] - t0) // minute_s), []).append(value)
    # A second of slack: `end` is taken just after the generator's last send.
    whole = float("inf") if end is None else (end + 1 - t0) // minute_s
    return [round(percentiles(buckets[m])["p99"], 4) for m in sorted(buckets) if 0 <= m < whole]


def steady(minutes: list[float], span: int) -> dict[str, Any]:
    """First `span` minutes' p99 against the last `span`'s (medians), within 20%."""
    if len(minutes) < 2:
        return {"first": None, "last": None, "ratio": None, "steady": None}
    span = max(1, min(span, len(minutes) // 2))
    first = sorted(minutes[:span])[span // 2]
    last = sorted(minutes[-span:])[span // 2]
    ratio = last / first if first else None
    return {"first": first, "last": last, "ratio": ratio,
            "steady": ratio is not None and abs(ratio - 1) <= STEADY_SHARE}


def soak(bench: Bench) -> list[Outcome]:
    env = bench.env
    label = "soak"
    topics = env.topic_names(label, W2_TOPICS)
    env.create_topics(topics, W2_PARTITIONS)
    seconds = bench.scale.soak_seconds
    # Quick runs are 2 minutes: "minutes" of 15 s, first and last 30 s compared.
    minute = 15.0 if bench.scale.quick else 60.0
    span = 2 if bench.scale.quick else 5
    samples: list[dict[str, Any]] = []
    done = threading.Event()
    ledger = Path(bench.config("SOAK", "postgresql://x@127.0.0.1/x", label).ledger.path)
    log(f"SOAK: relay, {SOAK_RATE} msg/s for {seconds:.0f} s")
    try:
        with running(bench, "SOAK", label, False, topics, W2_PARTITIONS) as run:
            run.warm_up(SOAK_RATE, 10.0)
            started = time.time()

            def sample() -> None:
                while not done.wait(SAMPLE_S):
                    samples.append({"t": round(time.time() - started, 1),
                                    "queue_bytes": queue_bytes(run.url), **ledger_files(ledger),
                                    **jit_counters(run.relay.jvm_pid if run.relay else None)})

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            n = generate(run.url, Load(SOAK_RATE, W2_TX, seconds, tuple(topics), W2_KEYS),
                         run.run_dir / "generated.bin")
            ended = time.time()
            done.set()
            sampler.join()
            run.consumer.wait_for(run.consumer.count + 1, 10)
        relay = relay_summary(run)
        created, lat, dup = read_latencies(run, "generated.bin")
    finally:
        done.set()
        env.delete_topics(topics)
    minutes = per_minute_p99(created, lat, started, minute, ended)
    result = Outcome(RELAY, n, ended - started, window=(started, ended), extra={
        **latency_extra(list(lat.values()), n, dup), "minute_s": minute,
        "p99_per_minute": minutes, "first_vs_last": steady(minutes, span),
        "samples": samples, "achieved_rate": round(n / (ended - started), 1), **relay,
    })
    result.extra["outside_cpu"] = bench.outside.window(started, ended) if bench.outside else None
    log(f"SOAK: p99 per minute {minutes}; first vs last {result.extra['first_vs_last']}")
    return [result]
