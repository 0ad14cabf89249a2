"""The tests' one reader of Kafka: the independent oracle that every tier (integration,
faults) reads the relay's records back through, with a consumer of its own (no group
offsets, partitions assigned directly, read_committed)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    TopicPartition,
)

ID_HEADER = "outbox-relay.id"


@dataclass
class Received:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)
    # The headers as the record holds them: in order, a repeated name twice.
    header_list: list[tuple[str, bytes]] = field(default_factory=list)
    # The record's timestamp in epoch milliseconds: when Kafka appended it, on a topic
    # whose message.timestamp.type is LogAppendTime (what a latency is measured against).
    timestamp_ms: int | None = None

    @property
    def outbox_id(self) -> int:
        return int(self.headers[ID_HEADER])


def _group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def consume(bootstrap: str, topics: Sequence[str], expect: int = 0, timeout_s: float = 60.0,
            conf: Mapping[str, str] | None = None) -> list[Received]:
    """Every record of `topics`, from the beginning, read with partitions assigned directly.

    Waits up to `timeout_s` for `expect` records (none: not at all), then fetches the high
    watermark of every partition and reads on, up to `timeout_s` more, until each is
    reached: every record Kafka holds once the count is in is read, a late duplicate too
    (a quiet period would stop at the first pause). A consumer error fails the test; a
    partition's end is no error. `conf` adds client settings (e.g. SASL credentials)."""
    consumer = Consumer({
        **(conf or {}),
        "bootstrap.servers": bootstrap,
        "group.id": _group("verify"),
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
                ends = _marks(bootstrap, parts, conf)
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
                header_list=list(msg.headers() or []),
                timestamp_ms=_timestamp(msg.timestamp()),
            ))
            read_to[(msg.topic(), msg.partition())] = msg.offset() + 1
    finally:
        consumer.close()
    return out


def _timestamp(stamp: tuple[int, int]) -> int | None:
    kind, ms = stamp
    return None if kind == TIMESTAMP_NOT_AVAILABLE else ms


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


def _marks(bootstrap: str, parts: Sequence[tuple[str, int]],
           conf: Mapping[str, str] | None) -> dict[tuple[str, int], int]:
    """The high watermark of each partition: the end of the log, records of transactions
    still open included (a read_committed consumer would be told the stable offset)."""
    consumer = Consumer({**(conf or {}), "bootstrap.servers": bootstrap,
                         "group.id": _group("marks"), "isolation.level": "read_uncommitted"})
    try:
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30)[1]
                for t, p in parts}
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topics: Sequence[str],
                    conf: Mapping[str, str] | None = None) -> dict[tuple[str, int], int]:
    """The current end offset of every partition of `topics` (as `_marks` reads it). A
    topic the broker does not know fails the test: reading it would find nothing."""
    consumer = Consumer({**(conf or {}), "bootstrap.servers": bootstrap,
                         "group.id": _group("topic-marks")})
    try:
        metadata = consumer.list_topics(timeout=30)
    finally:
        consumer.close()
    parts = []
    for topic in topics:
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None:
            raise AssertionError(f"verification consumer: topic {topic}: "
                                 f"{meta.error if meta else 'not in metadata'}")
        parts += [(topic, p) for p in meta.partitions]
    return _marks(bootstrap, parts, conf)
