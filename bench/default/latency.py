"""The latency runs of the default benchmark (bench/default/run.py): a rate of messages on a
topic the relay never wrote to, in 10-row transactions, from LAT_START_S after launch;
each message's latency is its arrival at an independent consumer less its commit."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
from confluent_kafka import Consumer

from bench.common import log
from bench.default.cpu_tree import TreeCpu
from bench.default.run import Stack, spark_submit

LAT_START_S, LAT_WINDOW_S = 15.0, 60.0
LAT_TX_ROWS = 10


def _writer(stack: Stack, topic: str, rate: int, start_s: float, seconds: float, t0: float,
            sent: dict[int, float]) -> None:
    """`rate` msg/s in LAT_TX_ROWS-row transactions, from start_s to start_s + seconds."""
    conn = psycopg2.connect(stack.url)
    period = LAT_TX_ROWS / rate
    n = 0
    try:
        with conn.cursor() as cur:
            while time.time() - t0 < start_s:
                time.sleep(0.005)
            due = time.time()
            while time.time() - t0 < start_s + seconds:
                rows = [(topic, f"k{n + i}".encode(), f"k{n + i}", b'{"x":1}' + b"y" * 500)
                        for i in range(LAT_TX_ROWS)]
                psycopg2.extras.execute_values(
                    cur, "INSERT INTO kafka_messages (topic, key, partition_key, message) "
                    "VALUES %s", rows)
                conn.commit()
                at = time.time()
                for i in range(LAT_TX_ROWS):
                    sent[n + i] = at
                n += LAT_TX_ROWS
                due += period
                time.sleep(max(0.0, due - time.time()))
    finally:
        conn.close()


def _receiver(stack: Stack, topic: str, received: dict[int, float],
              stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"lat-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    while not stop.is_set():
        for m in consumer.consume(1000, 0.05):
            if m.error() is None:
                received.setdefault(int((m.key() or b"k-1")[1:]), time.time())
    consumer.close()


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)


def latency_run(stack: Stack, work: Path, rate: int, seconds: float,
                cpu_window: tuple[float, float] | None = None) -> dict[str, Any]:
    topic = f"bench.lat-{rate}-{uuid.uuid4().hex[:6]}"
    stack.create_topics([topic], 3)
    sent: dict[int, float] = {}
    received: dict[int, float] = {}
    stop = threading.Event()
    reader = threading.Thread(target=_receiver, args=(stack, topic, received, stop))
    reader.start()
    load = stack.settled()
    t0 = time.time()
    proc = spark_submit(stack, log_path=work / f"lat-{rate}.log")
    cpu = TreeCpu(proc.pid)
    marks: dict[str, dict[int, float]] = {}

    def sample(at: float, name: str) -> None:
        while time.time() - t0 < at:
            time.sleep(0.05)
        marks[name] = cpu.sample()

    samplers = []
    if cpu_window is not None:
        samplers = [threading.Thread(target=sample, args=(cpu_window[0], "a")),
                    threading.Thread(target=sample, args=(cpu_window[1], "b"))]
        for s in samplers:
            s.start()
    _writer(stack, topic, rate, LAT_START_S, seconds, t0, sent)
    for s in samplers:
        s.join()
    deadline = time.time() + 60
    while len(received) < len(sent) and time.time() < deadline:
        time.sleep(0.2)
    idle_a = cpu.sample()
    time.sleep(30)
    idle_b = cpu.sample()
    os.killpg(proc.pid, 15)
    proc.wait(120)
    stop.set()
    reader.join()

    def window(a: float, b: float) -> dict[str, Any]:
        ids = [i for i, at in sent.items() if a <= at - t0 < b]
        lat = [received[i] - sent[i] for i in ids if i in received]
        return {"n": len(ids), "missing": len(ids) - len(lat), "p50_s": _pct(lat, 0.5),
                "p99_s": _pct(lat, 0.99), "max_s": round(max(lat), 3) if lat else None}

    result: dict[str, Any] = {
        "rate": rate, "load_before": load,
        "first_minute": window(LAT_START_S, LAT_START_S + LAT_WINDOW_S),
        "steady": window(LAT_START_S + LAT_WINDOW_S, LAT_START_S + seconds),
        "idle_cores": round(cpu.cores(idle_a, idle_b, 30.0), 3),
    }
    if cpu_window is not None:
        result["cpu_cores"] = round(cpu.cores(marks["a"], marks["b"],
                                              cpu_window[1] - cpu_window[0]), 3)
    log(f"LAT {rate}: {result}")
    return result
