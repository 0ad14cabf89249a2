"""W5: 100 busy topics at 2,000 msg/s in all while one other topic drains a 500,000 row
backlog. The contender runs warm under the busy load; the backlog is then written to
the big topic in one transaction, and the busy topics' latency counts while the big
topic drains: from the backlog's commit (no contender can start on it before) to its
last record in Kafka. A big topic must not hold up the rest.

The write itself (500 MB on the same 2 cores) slows every busy row created while it
runs, whoever relays them: with the big topic excluded from the relay, busy p99 over
the write was 1.0-1.1 s against 0.3 s after it. So the write's own window is reported
apart, and beside it the whole span from the write's start."""

from __future__ import annotations

import threading
import time

from bench.backlog import Backlog, load
from bench.common import PEER, RELAY, W2_KEYS, W2_TX, Outcome, log
from bench.context import Bench
from bench.env import OffsetWatch
from bench.repeat import alternate
from bench.workloads.latency import Load, generate, rounded_percentiles
from bench.workloads.steady import latency_extra, read_latencies, relay_summary, running

BUSY_TOPICS, BUSY_RATE, PARTITIONS, BIG_KEYS = 100, 2000, 1, 10_000
DRAIN_CAP_S = 900.0  # the peer drains the big topic whole before it serves the others


def w5_run(bench: Bench, label: str, name: str) -> Outcome:
    env = bench.env
    busy = env.topic_names(f"{label}-busy", BUSY_TOPICS)
    big = env.topic_names(f"{label}-big", 1)
    env.create_topics([*busy, *big], PARTITIONS)
    rows = bench.scale.w5_backlog
    stop = threading.Event()
    counts: list[int] = []
    try:
        with running(bench, "W5", label, name == PEER, busy, PARTITIONS) as run:
            run.warm_up(BUSY_RATE, 10.0)
            trickle = threading.Thread(target=lambda: counts.append(generate(
                run.url, Load(BUSY_RATE, W2_TX, DRAIN_CAP_S * 2, tuple(busy), W2_KEYS),
                run.run_dir / "generated.bin", stop=stop)))
            trickle.start()
            time.sleep(5.0)  # the trickle steady before the backlog lands
            watch = OffsetWatch(env.admin, big, PARTITIONS).start()
            written = time.time()
            load(run.url, Backlog(rows, tuple(big), BIG_KEYS), settle=False, at_once=True)
            started = time.time()
            deadline = started + DRAIN_CAP_S
            while time.time() < deadline and env.end_offsets(big, PARTITIONS) < rows:
                time.sleep(0.5)
            watch.stop()
            drained = watch.last_change_at() or time.time()
            complete = watch.samples[-1][1] >= rows
            stop.set()
            trickle.join()
            time.sleep(3.0)  # the last busy records reach the consumer
        relay = relay_summary(run)
        generated, lat, dup = read_latencies(run, "generated.bin")
    finally:
        stop.set()
        env.delete_topics([*busy, *big])

    def between(t0: float, t1: float) -> list[float]:
        return [v for s, v in lat.items() if t0 <= generated[s] <= t1]

    during = between(started, drained)
    return Outcome(name, rows, drained - started, window=(written, drained), extra={
        **latency_extra(list(lat.values()), counts[0] if counts else 0, dup),
        "during_drain_latency_s": rounded_percentiles(during), "during_drain_messages": len(during),
        "write_s": round(started - written, 2),
        "during_write_latency_s": rounded_percentiles(between(written, started)),
        "write_and_drain_latency_s": rounded_percentiles(between(written, drained)),
        "big_topic_drained": complete,
        "drain_capped_at_s": None if complete else DRAIN_CAP_S, **relay,
    })


def w5(bench: Bench) -> list[Outcome]:
    contenders = [RELAY, PEER]
    out = []
    for i, (rep, name) in enumerate(alternate(contenders, bench.repeat_for("W5"))):
        log(f"W5: {name}, {BUSY_TOPICS} busy topics at {BUSY_RATE}/s, backlog of "
            f"{bench.scale.w5_backlog:,} on one more, run {rep + 1}")
        def one(label: str, name: str = name) -> Outcome:
            return w5_run(bench, label, name)

        outcome = bench.measured(one, f"w5-{i}", rep)
        log(f"W5: {name}: busy p99 during the drain "
            f"{outcome.extra['during_drain_latency_s']['p99']:.3f} s, drain "
            f"{outcome.seconds:.1f} s")
        out.append(outcome)
    return out
