"""Latency on a new topic: a steady rate of messages in 10-row transactions, on a topic the
relay never wrote to, from START_S after the relay's launch (the README's first command:
continuous, cold). A message's latency is its arrival at an independent consumer less
its insert's commit; a window holds the messages committed within it, in seconds after
launch. Beside each window, the CPU of the relay's processes over it (bench/procs.py);
over the run, their peak resident memory; and, for a case with `idle_s`, their CPU once
every message was received."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2.extras
from confluent_kafka import Consumer, TopicPartition

from bench import contenders
from bench.procs import PeakRss, Proc, cpu_between, tree
from bench.stack import Stack, connect, log
from bench.workloads.many import databases

START_S, TX_ROWS, PARTITIONS = 5.0, 10, 3
# The ledger's last copy after the last message (the shipped profile's
# ledger.flush_interval_s, 10 s) is work, not idleness: the idle window starts after it.
IDLE_AFTER_S = 10.0
# Late, in each window: longer than its target's p99 bound (docs/performance.md).
LATE_S = {"first_minute": 0.5, "steady": 0.2, "trickle": 1.0}


@dataclass(frozen=True)
class Case:
    rate: int
    windows: dict[str, tuple[float, float]]
    idle_s: float = 0.0
    # The relay's debug log on (bench/contenders.py), for the start-up's marks: where the
    # first minute's waits come from. Off where the CPU is the figure.
    debug: bool = False
    # With N, the relay relays N new databases of the stack, written to in turn, and one
    # more that is down (its server refuses connections): bench/workloads/many.py.
    databases: int = 0

    @property
    def until_s(self) -> float:
        return max(b for _, b in self.windows.values())


def cases(minute_s: float, idle_s: float) -> dict[str, Case]:
    """1,000 msg/s for its first minute; 500 msg/s for its first minute and the steady
    state of the next, then idle."""
    first = (START_S, START_S + minute_s)
    return {"LAT1000": Case(1000, {"first_minute": first}, debug=True),
            "LAT500": Case(500, {"first_minute": first,
                                 "steady": (first[1], first[1] + minute_s)}, idle_s)}


def many_stopped(minute_s: float) -> Case:
    """500 msg/s in all into seven databases of a relay of eight whose eighth is down: the
    second half of its first minute (the first is the eight streaming queries' start)."""
    return Case(500, {"steady": (START_S + minute_s / 2, START_S + minute_s)}, databases=7)


def many_idle(minute_s: float, idle_s: float, databases: int) -> Case:
    """A relay of `databases` databases (and one more that is down), a transaction of 10
    messages a second into one of them in turn: each database idle for over a minute
    (at a hundred) before its next. Its second minute (the first holds the session's
    start and the ledger's early polls), then idle."""
    return Case(10, {"trickle": (START_S + minute_s, START_S + 2 * minute_s)}, idle_s,
                databases=databases)


def _writer(urls: list[str], topic: str, case: Case, t0: float,
            sent: dict[int, float]) -> None:
    """`case.rate` messages a second into `topic`, a transaction at a time into each of
    `urls` in turn."""
    conns = [connect(url, autocommit=False) for url in urls]
    period, n = TX_ROWS / case.rate, 0
    try:
        time.sleep(max(0.0, t0 + START_S - time.time()))
        due = time.time()
        while time.time() - t0 < case.until_s:
            conn = conns[(n // TX_ROWS) % len(conns)]
            rows = [(topic, f"k{n + i}".encode(), f"k{n + i}", b'{"x":1}' + b"y" * 500)
                    for i in range(TX_ROWS)]
            with conn.cursor() as cur:
                psycopg2.extras.execute_values(
                    cur, "INSERT INTO kafka_messages (topic, key, partition_key, message) "
                    "VALUES %s", rows)
            conn.commit()
            at = time.time()
            sent.update((n + i, at) for i in range(TX_ROWS))
            n += TX_ROWS
            due += period
            time.sleep(max(0.0, due - time.time()))
    finally:
        for conn in conns:
            conn.close()


def _receiver(stack: Stack, topic: str, received: dict[int, float],
              stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"lat-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    while not stop.is_set():
        for m in consumer.consume(1000, 0.05):
            if m.error() is None:
                received.setdefault(int((m.key() or b"k-1")[1:]), time.time())
    consumer.close()


def _read_at(root: int, edges: list[float], t0: float,
             readings: dict[float, dict[int, Proc]]) -> None:
    for edge in edges:
        time.sleep(max(0.0, t0 + edge - time.time()))
        readings[edge] = tree(root)


def percentile(ordered: list[float], p: float) -> float | None:
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3) if ordered else None


def window(sent: dict[int, float], received: dict[int, float], t0: float,
           span: tuple[float, float], late_s: float) -> dict[str, Any]:
    """The latencies of the messages committed within `span` (seconds after t0), and
    when those that waited over `late_s` (or were never received) were committed."""
    ids = [i for i, at in sent.items() if span[0] <= at - t0 < span[1]]
    lat = sorted(received[i] - sent[i] for i in ids if i in received)
    late = [sent[i] - t0 for i in ids if received.get(i, float("inf")) - sent[i] > late_s]
    return {"n": len(ids), "missing": len(ids) - len(lat), "p50_s": percentile(lat, 0.5),
            "p99_s": percentile(lat, 0.99), "max_s": round(lat[-1], 3) if lat else None,
            "late": {"over_s": late_s, "n": len(late), "committed_from_s": round(min(late), 1),
                     "committed_to_s": round(max(late), 1)} if late else None}


def latency_run(stack: Stack, work: Path, name: str, case: Case) -> dict[str, Any]:
    topic = f"bench.{name.lower()}-{uuid.uuid4().hex[:6]}"
    stack.create_topics([topic], PARTITIONS)
    try:
        with databases(stack, work, case.databases) as (relayed, urls):
            result = _run(relayed, work, name, case, topic, urls)
    finally:
        stack.forget([topic])
    log(f"{name}: {result}")
    return result


def _run(stack: Stack, work: Path, name: str, case: Case, topic: str,
         urls: list[str]) -> dict[str, Any]:
    sent: dict[int, float] = {}
    received: dict[int, float] = {}
    stop = threading.Event()
    reader = threading.Thread(target=_receiver, args=(stack, topic, received, stop))
    reader.start()
    load = stack.settled([topic])
    log_path = work / f"{name.lower()}.log"
    t0 = time.time()
    proc = contenders.relay(stack, log_path=log_path, debug=case.debug)
    rss = PeakRss(proc.pid).start()
    readings: dict[float, dict[int, Proc]] = {}
    edges = sorted({edge for span in case.windows.values() for edge in span})
    sampler = threading.Thread(target=_read_at, args=(proc.pid, edges, t0, readings),
                               daemon=True)
    sampler.start()
    try:
        _writer(urls, topic, case, t0, sent)
        sampler.join()
        deadline = time.time() + 60
        while len(received) < len(sent) and time.time() < deadline:
            time.sleep(0.2)
        idle = None
        if case.idle_s:
            time.sleep(IDLE_AFTER_S)
            before = tree(proc.pid)
            time.sleep(case.idle_s)
            idle = cpu_between(before, tree(proc.pid), case.idle_s)
    finally:
        memory = rss.stop()
        code = contenders.stop(proc)
        stop.set()
        reader.join()
    result: dict[str, Any] = {"rate": case.rate, "load_before": load, "exit_code": code,
                              "first_record_s": round(min(received.values()) - t0, 2)
                              if received else None, "idle": idle, "memory": memory}
    for label, span in case.windows.items():
        got = window(sent, received, t0, span, LATE_S[label])
        cpu = cpu_between(readings[span[0]], readings[span[1]], span[1] - span[0])
        seconds = span[1] - span[0]
        got.update(cpu, cpu_s=round(cpu["cores"] * seconds, 1),
                   cpu_s_per_1k=round(1000 * cpu["cores"] * seconds / got["n"], 4)
                   if got["n"] else None)
        result[label] = got
    result.update(contenders.relay_output(log_path, t0))
    return result
