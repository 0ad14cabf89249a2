"""Test helpers for the integration tier: real PostgreSQL databases, real Kafka topics."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg2
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
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


def partitioning_bytes(partition_key: str | None, key: bytes | None) -> bytes | None:
    """The tests' own statement of the partitioning rule, deliberately not imported from
    the relay (relay.data.partitioning, SQL relay_partitioning_key): every oracle that
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
            conf: Mapping[str, str] | None = None) -> list[Received]:
    """Every record of `topics`, from the beginning, read with partitions assigned directly.

    Waits up to `timeout_s` for `expect` records, then fetches the high watermark of every
    partition and reads on until each is reached: every record Kafka holds once the count
    is in is read, a late duplicate too (a quiet period would stop at the first pause).
    A consumer error fails the test; a partition's end is no error. `conf` adds client
    settings (e.g. SASL credentials)."""
    consumer = Consumer({
        **(conf or {}),
        "bootstrap.servers": bootstrap,
        "group.id": unique("verify"),
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })
    out: list[Received] = []
    deadline = time.monotonic() + timeout_s
    try:
        parts = _partitions(consumer, topics, deadline)
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in parts])
        ends: dict[tuple[str, int], int] | None = None
        read_to = dict.fromkeys(parts, 0)
        while ends is None or any(read_to[tp] < end for tp, end in ends.items()):
            if ends is None and (len(out) >= expect or time.monotonic() >= deadline):
                ends = _high_watermarks(bootstrap, parts, conf)
                deadline = max(deadline, time.monotonic() + timeout_s)
                continue
            if time.monotonic() >= deadline:
                behind = {tp: (read_to[tp], end) for tp, end in ends.items() if read_to[tp] < end}
                raise AssertionError(f"could not read up to the high watermarks: {behind}")
            msg = consumer.poll(0.5)
            if msg is None:
                # The position also moves past records read_committed never hands out
                # (transaction markers, aborted records).
                for tp in consumer.position([TopicPartition(t, p) for t, p in parts]):
                    read_to[(tp.topic, tp.partition)] = max(read_to[(tp.topic, tp.partition)],
                                                            tp.offset)
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"verification consumer: {msg.error()}")
            out.append(Received(
                topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                key=msg.key(), value=msg.value(),
                headers={k: v for k, v in (msg.headers() or [])},
            ))
            read_to[(msg.topic(), msg.partition())] = msg.offset() + 1
    finally:
        consumer.close()
    return out


def _partitions(consumer: Consumer, topics: Sequence[str],
                deadline: float) -> list[tuple[str, int]]:
    """Every partition of `topics`, once the broker's metadata knows them all."""
    while True:
        metadata = consumer.list_topics(timeout=10)
        missing = {t: metadata.topics[t].error if t in metadata.topics else "not in metadata"
                   for t in topics
                   if t not in metadata.topics or metadata.topics[t].error is not None}
        if not missing:
            return [(t, p) for t in topics for p in sorted(metadata.topics[t].partitions)]
        if time.monotonic() >= deadline:
            raise AssertionError(f"verification consumer: topics unavailable: {missing}")
        time.sleep(0.5)


def _high_watermarks(bootstrap: str, parts: Sequence[tuple[str, int]],
                     conf: Mapping[str, str] | None) -> dict[tuple[str, int], int]:
    """The high watermark of each partition: the end of the log, records of transactions
    still open included (a read_committed consumer would be told the stable offset)."""
    consumer = Consumer({**(conf or {}), "bootstrap.servers": bootstrap,
                         "group.id": unique("marks"), "isolation.level": "read_uncommitted"})
    try:
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                for t, p in parts}
    finally:
        consumer.close()


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
