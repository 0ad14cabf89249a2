"""The default benchmark (`make bench`): the shipped profile under a user's conditions.

Everything here runs as the README runs it: the local stack that `make demo` starts
(its `postgres` database, with whatever history it holds), `spark-submit jobs/relay.py
--config conf/local.toml` with only the addresses set, nothing warmed, every topic new
to the relay. Rows are written by an application's ordinary transactions. Each figure
is read from Kafka by an independent consumer (tests/kafka_readback.py's reads are the
same: end offsets and records), never from the relay's own counts.

- W1: 10 topics of 3 partitions x 100,000 messages of 1 KB, 10,000 keys, two thirds with
  `partition_key` equal to the key; one connection, 500-row transactions, topics
  interleaved, then VACUUM ANALYZE. The relay, then the peer (bench/peer.py), each on a
  fresh copy of the backlog. `drain_s`: first record in Kafka to the last; `exit_s`:
  launch to process exit (the final ledger copy included).
- LAT: 1,000 msg/s in 10-row transactions on a topic the relay never wrote to, from 15 s
  to 135 s after launch: the first minute (inserted 15-75 s after launch) and the
  steady state (75-135 s) apart. Then 500 msg/s the same way, for the CPU of the
  relay's processes (its driver JVM and Python, 35-130 s), and idle CPU after it.
- FIRST: launch to the first message delivered, with messages waiting on a new topic.

W3 and W5 run through the full suite's workloads (bench/workloads) on the same profile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import REPO, log, sys_load
from bench.cpu_tree import TreeCpu

W1_TOPICS, W1_ROWS_PER_TOPIC, W1_KEYS, W1_PARTITIONS, W1_TX_ROWS = 10, 100_000, 10_000, 3, 500
LAT_START_S, LAT_WINDOW_S = 15.0, 60.0
LAT_TX_ROWS = 10

FILL = """
INSERT INTO kafka_messages (topic, message, key, partition_key, created_at, updated_at)
SELECT (%(topics)s::varchar[])[1 + g %% %(ntopics)s],
       convert_to(rpad('{"n":' || g || ',"d":"', 998, md5(g::text)) || '"}', 'UTF8'),
       convert_to('k' || (g %% %(nkeys)s), 'UTF8'),
       CASE WHEN g %% 3 = 0 THEN NULL ELSE 'k' || (g %% %(nkeys)s) END, now(), now()
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g ORDER BY g
"""


@dataclass
class Stack:
    url: str
    bootstrap: str
    env: dict[str, str] = field(default_factory=dict)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topics(self, topics: list[str], partitions: int) -> None:
        admin = self.admin()  # held until the futures resolve: its end cancels them
        futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
        for f in futures.values():
            f.result()


def spark_submit(stack: Stack, *args: str, log_path: Path) -> subprocess.Popen[bytes]:
    """The relay as the README launches it: spark-submit, conf/local.toml."""
    submit = str(Path(sys.executable).parent / "spark-submit")
    out = log_path.open("wb")
    return subprocess.Popen([submit, "jobs/relay.py", "--config", "conf/local.toml", *args],
                            cwd=REPO, env=stack.env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def end_offsets(consumer: Consumer, topics: list[str]) -> int:
    """The sum of the end offsets of `topics`, by one consumer kept for the whole watch
    (a new one per sample cost the machine CPU beside the contenders)."""
    from confluent_kafka import TopicPartition

    meta = consumer.list_topics(timeout=10).topics
    return sum(consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
               for t in topics for p in meta[t].partitions)


def watch_delivery(stack: Stack, topics: list[str], expected: int, t0: float,
                   timeout_s: float) -> tuple[float | None, float | None]:
    """(first, last): seconds after t0 when Kafka first held a record of `topics`, and when
    it held `expected` records."""
    first = last = None
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "bench-offsets"})
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            n = end_offsets(consumer, topics)
            now = time.time() - t0
            if n and first is None:
                first = now
            if n >= expected:
                last = now
                break
            time.sleep(0.1)
    finally:
        consumer.close()
    return first, last


def read_back(stack: Stack, topics: list[str], expected: int) -> dict[str, int]:
    """Counts, duplicates and per-key inversions of what Kafka holds, by the row number
    every W1 value starts with ({"n":<g>,...)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"rb-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(topics)
    seen: set[int] = set()
    last: dict[tuple[str | None, bytes | None], int] = {}
    records = duplicates = inversions = 0
    idle_since = time.monotonic()
    while records < expected and time.monotonic() - idle_since < 30:
        batch = consumer.consume(10_000, 1.0)
        for m in batch:
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(str(error))
            value = m.value() or b""
            n = int(value[5:value.index(b",")])
            records += 1
            duplicates += n in seen
            seen.add(n)
            key = (m.topic(), m.key())
            inversions += last.get(key, -1) > n
            last[key] = max(last.get(key, -1), n)
        if batch:
            idle_since = time.monotonic()
    consumer.close()
    return {"records": records, "distinct": len(seen), "duplicates": duplicates,
            "inversions": inversions}


def fill_w1(stack: Stack, label: str) -> list[str]:
    topics = [f"bench.{label}.t{i}" for i in range(W1_TOPICS)]
    stack.create_topics(topics, W1_PARTITIONS)
    conn = psycopg2.connect(stack.url)
    try:
        with conn.cursor() as cur:
            total = W1_TOPICS * W1_ROWS_PER_TOPIC
            for lo in range(0, total, W1_TX_ROWS):
                cur.execute(FILL, {"topics": topics, "ntopics": W1_TOPICS, "nkeys": W1_KEYS,
                                   "lo": lo, "hi": lo + W1_TX_ROWS - 1})
                conn.commit()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("VACUUM ANALYZE kafka_messages")
    finally:
        conn.close()
    return topics


def w1(stack: Stack, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    expected = W1_TOPICS * W1_ROWS_PER_TOPIC
    for name, command in (("relay", None), ("peer", "peer")):
        topics = fill_w1(stack, f"w1-{name}-{uuid.uuid4().hex[:6]}")
        load = sys_load()
        t0 = time.time()
        if command is None:
            proc = spark_submit(stack, "--available-now", log_path=work / "w1-relay.log")
        else:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.peer", "--url", stack.url, "--bootstrap",
                 stack.bootstrap, "--drain", "--stats", str(work / "w1-peer.json")],
                cwd=REPO, env=stack.env, start_new_session=True)
        first, last = watch_delivery(stack, topics, expected, t0, 900)
        code = proc.wait(900)
        exit_s = time.time() - t0
        check = read_back(stack, topics, expected)
        drain = (last - first) if first is not None and last is not None else None
        out[name] = {"drain_s": round(drain, 1) if drain else None,
                     "first_record_s": round(first, 1) if first else None,
                     "exit_s": round(exit_s, 1), "exit_code": code, "load_before": load,
                     **check}
        log(f"W1 {name}: {out[name]}")
    relay, peer = out["relay"], out["peer"]
    if relay["drain_s"] and peer["drain_s"]:
        out["drain_ratio"] = round(peer["drain_s"] / relay["drain_s"], 2)
        out["exit_ratio"] = round(peer["exit_s"] / relay["exit_s"], 2)
    return out


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
    load = sys_load()
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


def first_message(stack: Stack, work: Path) -> dict[str, Any]:
    """Launch to the first message delivered, 100 messages waiting on a new topic."""
    topic = f"bench.first-{uuid.uuid4().hex[:6]}"
    stack.create_topics([topic], 3)
    conn = psycopg2.connect(stack.url)
    with conn, conn.cursor() as cur:
        psycopg2.extras.execute_values(
            cur, "INSERT INTO kafka_messages (topic, key, message) VALUES %s",
            [(topic, f"k{i}".encode(), b"{}") for i in range(100)])
    conn.close()
    t0 = time.time()
    proc = spark_submit(stack, "--available-now", log_path=work / "first.log")
    first, _ = watch_delivery(stack, [topic], 1, t0, 120)
    proc.wait(120)
    result = {"launch_to_first_s": round(first, 2) if first else None}
    log(f"FIRST: {result}")
    return result


def run_day(stack: Stack, work: Path, parts: list[str],
            more: Callable[[str], Any] | None = None) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"load_start": sys_load()}
    if "W1" in parts:
        results["W1"] = w1(stack, work)
    if "LAT" in parts:
        results["LAT1000"] = latency_run(stack, work, 1000, 2 * LAT_WINDOW_S)
        results["LAT500"] = latency_run(stack, work, 500, 2 * LAT_WINDOW_S,
                                        cpu_window=(35.0, 130.0))
    if "FIRST" in parts:
        results["FIRST"] = first_message(stack, work)
    for name in ("W3", "W5"):
        if name in parts and more is not None:
            results[name] = more(name)
    results["load_end"] = sys_load()
    return results
