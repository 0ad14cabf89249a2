"""W2's load generator and consumer: latency from a row's created_at to a consumer's receipt.

The generator inserts at a fixed rate, in transactions of a fixed size, and records each
row's (sequence number, created_at). Each payload starts with its sequence number, so
the consumer can match records of any relay, the peer too (it sends no headers). The
consumer runs in a process of its own, assigned to every partition from the start, and
stamps each record on receipt.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.synchronize
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.backlog import payload_pool
from bench.env import connect

SEQ = struct.Struct(">q")


class Flag(Protocol):
    """A stop flag: a multiprocessing or a threading Event."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Load:
    rate: int  # messages per second
    tx_size: int  # messages per transaction
    seconds: float
    topics: tuple[str, ...]
    keys: int


def generate(
    url: str, load: Load, out: Path, start_seq: int = 0, stop: Flag | None = None
) -> int:
    """Insert at `load.rate`; write (seq, created_at epoch) pairs to `out`; return rows."""
    pool = payload_pool()
    conn = connect(url, autocommit=False)
    tx_per_s = load.rate / load.tx_size
    started = time.monotonic()
    seq = start_seq
    rows: list[tuple[int, float]] = []
    values = ",".join(["(%s, %s, %s)"] * load.tx_size)
    statement = (
        f"INSERT INTO kafka_messages (topic, message, key) VALUES {values} "
        "RETURNING extract(epoch FROM created_at)::float8"
    )
    try:
        with conn.cursor() as cur:
            n_tx = int(load.seconds * tx_per_s)
            for i in range(n_tx):
                if stop is not None and stop.is_set():
                    break
                due = started + i / tx_per_s
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                params: list[object] = []
                batch_seqs = []
                for _ in range(load.tx_size):
                    topic = load.topics[seq % len(load.topics)]
                    key = f"k{seq % load.keys}".encode()
                    payload = SEQ.pack(seq) + pool[seq % len(pool)][SEQ.size :]
                    params += [topic, payload, key]
                    batch_seqs.append(seq)
                    seq += 1
                cur.execute(statement, params)
                created = cur.fetchone()[0]  # one transaction: one created_at for all
                conn.commit()
                rows += [(s, created) for s in batch_seqs]
    finally:
        conn.close()
    with open(out, "wb") as f:
        for s, c in rows:
            f.write(struct.pack(">qd", s, c))
    return len(rows)


def read_generated(path: Path) -> dict[int, float]:
    data = path.read_bytes()
    rec = struct.Struct(">qd")
    return {s: c for s, c in rec.iter_unpack(data)}


def _consume(
    bootstrap: str,
    topics: list[str],
    partitions: int,
    out: str,
    ready: mp.synchronize.Event,
    done: mp.synchronize.Event,
    count: Any,
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-latency-{time.time_ns()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
            "fetch.min.bytes": 1,
        }
    )
    consumer.assign(
        [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(partitions)]
    )
    consumer.poll(0.5)
    ready.set()
    received: list[tuple[int, float]] = []
    while not done.is_set():
        for msg in consumer.consume(num_messages=1000, timeout=0.05):
            now = time.time()
            value = msg.value()
            if msg.error() is None and value is not None:
                received.append((SEQ.unpack_from(value)[0], now))
        count.value = len(received)
    consumer.close()
    with open(out, "wb") as f:
        for s, t in received:
            f.write(struct.pack(">qd", s, t))


class LatencyConsumer:
    """A consumer process: start() before the load, stop() after; receipts() after that."""

    def __init__(self, bootstrap: str, topics: list[str], partitions: int, out: Path) -> None:
        ctx = mp.get_context("spawn")
        self._ready = ctx.Event()
        self._done = ctx.Event()
        self._out = out
        self._count = ctx.Value("q", 0)
        self._proc = ctx.Process(
            target=_consume,
            args=(bootstrap, topics, partitions, str(out), self._ready, self._done, self._count),
            daemon=True,
        )

    def start(self) -> None:
        self._proc.start()
        if not self._ready.wait(60):
            raise RuntimeError("latency consumer did not start")

    @property
    def count(self) -> int:
        return int(self._count.value)

    def wait_for(self, n: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.count < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def stop(self) -> None:
        self._done.set()
        self._proc.join(60)

    def receipts(self) -> list[tuple[int, float]]:
        rec = struct.Struct(">qd")
        return list(rec.iter_unpack(self._out.read_bytes()))


def percentiles(values: list[float], points: tuple[float, ...] = (50, 95, 99)) -> dict[str, float]:
    if not values:
        return {f"p{int(p)}": float("nan") for p in points}
    ordered = sorted(values)
    out = {}
    for p in points:
        rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
        out[f"p{int(p)}"] = ordered[rank]
    out["max"] = ordered[-1]
    out["mean"] = sum(ordered) / len(ordered)
    return out


def rounded_percentiles(values: list[float]) -> dict[str, float]:
    """percentiles() to the 0.1 ms the reports keep."""
    return {k: round(v, 4) for k, v in percentiles(values).items()}
