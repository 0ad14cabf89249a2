"""W2C: the W2 rate curve. One continuous contender, warmed up once, takes 200, 1k, 2k
and 5k msg/s in turn (each for a fixed time); p99 at each rate, and where it saturates:
its backlog grows during the window. Above a saturated rate nothing more is learnt, so
the curve stops there; a rate the generator itself cannot sustain ends it too."""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.common import PEER, RELAY, W2_KEYS, W2_PARTITIONS, W2_TOPICS, W2_TX, Outcome, log
from bench.context import Bench
from bench.env import outbox_count
from bench.repeat import alternate
from bench.workloads.latency import Load, generate
from bench.workloads.steady import latency_extra, read_latencies, relay_summary, running

# The backlog grows by more than this share of the offered rate per second: saturated.
GROWTH_SHARE = 0.05
# The generator reaching less than this share of a rate: the machine cannot offer it.
GENERATOR_SHARE = 0.9


def slope(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope (rows per second) of (time, backlog) samples."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mb = sum(b for _, b in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return sum((t - mt) * (b - mb) for t, b in samples) / den if den else 0.0


def saturated(samples: list[tuple[float, int]], rate: float, caught_up: bool) -> bool:
    """Cannot keep up: the backlog grew through the window, or was not gone after it."""
    return slope(samples) > GROWTH_SHARE * rate or not caught_up


def _watch_backlog(url: str, done: threading.Event, out: list[tuple[float, int]]) -> None:
    while not done.wait(0.5):
        out.append((time.time(), outbox_count(url)))


def curve_run(bench: Bench, label: str, name: str) -> Outcome:
    env = bench.env
    topics = env.topic_names(label, W2_TOPICS)
    env.create_topics(topics, W2_PARTITIONS)
    seconds = bench.scale.w2c_seconds
    points: list[dict[str, Any]] = []
    started = time.time()
    try:
        with running(bench, "W2C", label, name == PEER, topics, W2_PARTITIONS) as run:
            run.warm_up(bench.scale.w2c_rates[0])
            expected = run.consumer.count
            for i, rate in enumerate(bench.scale.w2c_rates):
                samples: list[tuple[float, int]] = []
                done = threading.Event()
                watcher = threading.Thread(target=_watch_backlog, args=(run.url, done, samples))
                watcher.start()
                t0 = time.time()
                n = generate(run.url, Load(rate, W2_TX, seconds, tuple(topics), W2_KEYS),
                             run.run_dir / f"rate-{rate}.bin", start_seq=i * 10**10)
                took = time.time() - t0
                done.set()
                watcher.join()
                expected += n
                caught_up = run.consumer.wait_for(expected, max(30.0, seconds))
                point = {"rate": rate, "generated": n, "achieved_rate": round(n / took, 1),
                         "backlog_slope": round(slope(samples), 1),
                         "saturated": saturated(samples, rate, caught_up),
                         "generator_short": n / took < GENERATOR_SHARE * rate}
                points.append(point)
                log(f"W2C: {name} at {rate}/s: achieved {point['achieved_rate']}/s, backlog "
                    f"slope {point['backlog_slope']}/s, saturated {point['saturated']}")
                if point["saturated"] or point["generator_short"]:
                    break
        relay = relay_summary(run)
        for point in points:
            _, lat, dup = read_latencies(run, f"rate-{point['rate']}.bin")
            point.update(latency_extra(list(lat.values()), int(point["generated"]), dup))
    finally:
        env.delete_topics(topics)
    total = sum(p["generated"] for p in points)
    sustained = [p["rate"] for p in points if not p["saturated"] and not p["generator_short"]]
    return Outcome(name, total, time.time() - started, window=(started, time.time()), extra={
        "points": points, "highest_sustained_rate": max(sustained, default=None),
        "saturated_at": next((p["rate"] for p in points if p["saturated"]), None), **relay,
    })


def w2c(bench: Bench) -> list[Outcome]:
    contenders = [RELAY, PEER]
    out = []
    # One pass each: the time plan (bench/plan.py) gives the curve a single run.
    for i, (rep, name) in enumerate(alternate(contenders, 1)):
        def one(label: str, name: str = name) -> Outcome:
            return curve_run(bench, label, name)

        out.append(bench.measured(one, f"w2c-{i}", rep))
    return out
