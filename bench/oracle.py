"""What Kafka holds, read by clients independent of both contenders: the end offsets of a
part's topics while a contender runs (when its first record landed, when its last did),
and afterwards every record read back (counts, duplicates, per-key order). No figure
comes from a contender's own counts."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from bench.stack import Stack


class EndOffsets:
    """The sum of the end offsets of some topics, in one request for all partitions (so
    watching 1,000 topics is as cheap as watching one)."""

    def __init__(self, stack: Stack, topics: Sequence[str]) -> None:
        self.admin: AdminClient = stack.admin()
        meta = self.admin.list_topics(timeout=30).topics
        self.partitions = [TopicPartition(t, p) for t in topics for p in meta[t].partitions]

    def total(self) -> int:
        request = {tp: OffsetSpec.latest() for tp in self.partitions}
        futures = self.admin.list_offsets(request, request_timeout=30)
        return sum(f.result().offset for f in futures.values())


@dataclass
class Delivery:
    """Seconds after launch when Kafka first held a record of the topics, and when it
    held all expected (None: not by the end of the watch); what it held then."""

    first_s: float | None
    last_s: float | None
    delivered: int
    ended_s: float


def watch(stack: Stack, topics: Sequence[str], expected: int, t0: float, timeout_s: float,
          running: Callable[[], bool]) -> Delivery:
    """Samples until `expected` records are in, `timeout_s` after t0 (a contender's cap),
    or the contender has exited."""
    offsets = EndOffsets(stack, topics)
    first = last = None
    n = 0
    while True:
        alive = running()
        with contextlib.suppress(KafkaException):  # a moment without a leader: next sample
            n = offsets.total()
        now = time.time() - t0
        if n and first is None:
            first = now
        if n >= expected:
            last = now
            break
        if now >= timeout_s or not alive:
            break
        # A sample of 1,000 partitions costs this process about 13 ms of CPU: beside
        # W3's contenders, four a second are enough.
        time.sleep(0.1 if len(offsets.partitions) <= 100 else 0.25)
    return Delivery(first, last, n, now)


def value_number(value: bytes) -> int:
    """The row number every benchmark payload starts with: {"n":<g>,..."""
    return int(value[5:value.index(b",")])


def read_back(stack: Stack, topics: Sequence[str], expected: int) -> dict[str, int]:
    """Every record of `topics` from the start: records, distinct rows, duplicates, and
    per-key inversions (a row of a key after a higher one of the same key)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"rb-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(tp.topic, tp.partition, 0)
                     for tp in EndOffsets(stack, topics).partitions])
    seen: set[int] = set()
    last: dict[tuple[str | None, bytes | None], int] = {}
    records = duplicates = inversions = 0
    idle_since = time.monotonic()
    while records < expected and time.monotonic() - idle_since < 20:
        batch = consumer.consume(10_000, 1.0)
        for m in batch:
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(str(error))
            n = value_number(m.value() or b"")
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
            "inversions": inversions, "missing": max(0, expected - len(seen))}
