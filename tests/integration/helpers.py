"""Test helpers for the integration tier: real PostgreSQL databases, real Kafka topics."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg2
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

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


@dataclass
class Received:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)

    @property
    def outbox_id(self) -> int:
        return int(self.headers["outbox-relay.id"])


def consume(bootstrap: str, topics: Sequence[str], expect: int, timeout_s: float = 60.0,
            settle_s: float = 2.0, conf: Mapping[str, str] | None = None) -> list[Received]:
    """Everything on `topics` from the beginning; waits for `expect` records, then a
    little longer so that extra records (duplicates) are seen too. `conf` adds client
    settings (e.g. SASL credentials)."""
    consumer = Consumer({
        **(conf or {}),
        "bootstrap.servers": bootstrap,
        "group.id": unique("verify"),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })
    consumer.subscribe(list(topics))
    out: list[Received] = []
    deadline = time.monotonic() + timeout_s
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if len(out) >= expect:
                    quiet_until = quiet_until or time.monotonic() + settle_s
                    if time.monotonic() >= quiet_until:
                        break
                continue
            if msg.error():
                continue
            out.append(Received(
                topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                key=msg.key(), value=msg.value(),
                headers={k: v for k, v in (msg.headers() or [])},
            ))
    finally:
        consumer.close()
    return out


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
