"""Test helpers for the integration tier: real PostgreSQL databases, real Kafka topics."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# The reader of Kafka both tiers share; imported from here by the integration tests.
from tests.kafka_readback import Received, consume

__all__ = ["Msg", "Received", "consume", "create_topics", "end_offsets", "every_key_shape",
           "insert", "order_report", "partitioning_bytes", "query", "unique", "wait_for"]

INSERT = """
INSERT INTO kafka_messages (topic, message, key, partition_key, headers)
VALUES (%s, %s, %s, %s, %s) RETURNING id
"""


@dataclass(frozen=True)
class Msg:
    topic: str
    key: bytes | None
    value: bytes | None
    partition_key: str | None = None
    headers: dict[str, Any] | None = None


def partitioning_bytes(partition_key: str | None, key: bytes | None) -> bytes | None:
    """The tests' own statement of the partitioning rule, deliberately not imported from
    the relay (outbox_relay.data.partitioning, SQL relay_partitioning_key): every oracle that
    checks per-key order takes its keys from here."""
    return partition_key.encode("utf-8") if partition_key is not None else key


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topics(bootstrap: str, topics: dict[str, int], **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, num_partitions=n, replication_factor=1, config=dict(config))
           for t, n in topics.items()]
    for future in admin.create_topics(new).values():
        future.result()


def insert(url: str, transactions: Iterable[Sequence[Msg]]) -> list[int]:
    """Insert messages, one database transaction per inner sequence; returns ids."""
    ids: list[int] = []
    conn = psycopg2.connect(url)
    try:
        for tx in transactions:
            with conn, conn.cursor() as cur:
                for m in tx:
                    headers = json.dumps(m.headers) if m.headers is not None else None
                    cur.execute(INSERT, (m.topic, m.value, m.key, m.partition_key, headers))
                    ids.append(cur.fetchone()[0])
    finally:
        conn.close()
    return ids


def query(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("offsets")})
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    """Whether `predicate` came true within `timeout_s`, polled every `interval_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return False


def every_key_shape(topics: list[str], per_topic: int) -> list[Msg]:
    """Every key shape: partition_key NULL, equal to the key's text, different from it;
    NULL keys with and without a partition_key; binary keys; tombstones."""
    out: list[Msg] = []
    for topic in topics:
        for i in range(per_topic):
            value = f"{topic}:{i}".encode()
            key = f"key-{i % 5}"
            shape = i % 6
            if shape == 0:
                out.append(Msg(topic, key.encode(), value))
            elif shape == 1:
                out.append(Msg(topic, key.encode(), value, partition_key=key))
            elif shape == 2:
                out.append(Msg(topic, key.encode(), value, partition_key=f"pk-{i % 3}"))
            elif shape == 3:
                out.append(Msg(topic, None, value))
            elif shape == 4:
                out.append(Msg(topic, None, value, partition_key=f"pk-{i % 3}"))
            else:
                binary = bytes([0xFF, 0x00, i % 7, 0x80])
                out.append(Msg(topic, binary, None if i % 12 == 11 else value))
    return out


def order_report(written: dict[int, Msg], got: Sequence[Received]) -> tuple[int, int, int]:
    """(inversions, keys spread over several partitions, keyless records received).

    An inversion is a first appearance of an id after a higher id of the same
    (topic, partitioning bytes) had already appeared in its partition.
    """
    groups: dict[tuple[str, bytes], list[Received]] = defaultdict(list)
    keyless = 0
    for r in got:
        m = written[r.outbox_id]
        pbytes = partitioning_bytes(m.partition_key, m.key)
        if pbytes is None:
            keyless += 1
        else:
            groups[(m.topic, pbytes)].append(r)
    inversions = spread = 0
    for records in groups.values():
        spread += len({r.partition for r in records}) > 1
        seen: set[int] = set()
        highest = -1
        for r in sorted(records, key=lambda r: (r.partition, r.offset)):
            if r.outbox_id in seen:
                continue
            seen.add(r.outbox_id)
            inversions += r.outbox_id < highest
            highest = max(highest, r.outbox_id)
    return inversions, spread, keyless
