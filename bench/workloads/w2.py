"""W2: steady latency at 1,000 msg/s for 60 s, relay and peer alternating, and the floor
probe (bench/probes/floor.py: a bare Spark job, 10 rows over JDBC into the Kafka sink)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import (
    FLOOR_PROBE,
    FLOOR_RUNS,
    PEER,
    RELAY,
    REPO,
    W2_KEYS,
    W2_PARTITIONS,
    W2_RATE,
    W2_TOPICS,
    W2_TX,
    W2_WARMUP_S,
    Outcome,
    cdf,
    log,
    sys_load,
)
from bench.context import Bench
from bench.repeat import alternate
from bench.workloads.latency import Load, generate, rounded_percentiles
from bench.workloads.steady import latency_extra, read_latencies, relay_summary, running


def latency_run(bench: Bench, label: str, name: str) -> Outcome:
    env = bench.env
    topics = env.topic_names(label, W2_TOPICS)
    env.create_topics(topics, W2_PARTITIONS)
    seconds = bench.scale.w2_seconds
    try:
        with running(bench, "W2", label, name == PEER, topics, W2_PARTITIONS) as run:
            caught_up = run.warm_up(W2_RATE)
            load_before = sys_load()
            started = time.time()
            n = generate(run.url, Load(W2_RATE, W2_TX, seconds, tuple(topics), W2_KEYS),
                         run.run_dir / "generated.bin")
            generated_for = time.time() - started
            complete = run.consumer.wait_for(10 + int(W2_WARMUP_S * W2_RATE) + n, 120)
        relay = relay_summary(run)
        _, lat, duplicates = read_latencies(run, "generated.bin")
    finally:
        env.delete_topics(topics)
    values = list(lat.values())
    return Outcome(name, n, generated_for, window=(started, started + generated_for), extra={
        **latency_extra(values, n, duplicates), "complete": complete,
        "caught_up_after_warmup": caught_up, "generator_seconds": round(generated_for, 2),
        "achieved_rate": round(n / generated_for, 1), "sysload_before": load_before,
        "sysload_after": sys_load(), "cdf": cdf(values), **relay,
    })


def floor_probe(bench: Bench, label: str) -> Outcome:
    env = bench.env
    url = env.fresh_database(label)
    topic = env.topic_names(label, 1)[0]
    env.create_topics([topic], 1)
    submit = Path(sys.executable).parent / "spark-submit"
    done = subprocess.run(
        [str(submit), str(REPO / "bench" / "probes" / "floor.py"), "--url", url, "--bootstrap",
         env.stack.kafka_bootstrap, "--topic", topic, "--runs", str(FLOOR_RUNS)],
        cwd=REPO, capture_output=True, text=True, check=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1]
    durations = json.loads(line)["durations_s"]
    env.drop_database(url)
    env.delete_topics([topic])
    return Outcome(FLOOR_PROBE, 10 * len(durations), sum(durations), {
        "latency_s": rounded_percentiles(durations),
        "runs": len(durations),
    })


def w2(bench: Bench) -> list[Outcome]:
    """The relay, the peer and the floor probe alternate. The probe repeats like the
    contenders: its p50 read 0.077 s in one full run and 0.104 s in the next, with the
    same code on its side, and the W2 target is a ratio to it."""
    contenders = [RELAY, PEER, FLOOR_PROBE]
    results = []
    for i, (rep, name) in enumerate(alternate(contenders, bench.repeat_for("W2"))):
        if name == FLOOR_PROBE:
            log(f"W2: {FLOOR_PROBE}, {FLOOR_RUNS} runs, run {rep + 1}")
            outcome = bench.measured(lambda label: floor_probe(bench, label), f"w2-floor-{rep}",
                                     rep)
        else:
            log(f"W2: {name}, {W2_RATE} msg/s for {bench.scale.w2_seconds:.0f} s, run {rep + 1}")
            def one(label: str, name: str = name) -> Outcome:
                return latency_run(bench, label, name)

            outcome = bench.measured(one, f"w2-{i}", rep)
        lat = outcome.extra["latency_s"]
        log(f"W2: {name}: p50 {lat['p50']:.3f} s, p95 {lat['p95']:.3f} s, p99 {lat['p99']:.3f} s")
        results.append(outcome)
    return results
