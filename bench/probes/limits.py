"""THE LIMITS: what PostgreSQL alone and Kafka alone can do with the same payloads.

* PostgreSQL: one set-based read of every row (``COPY (SELECT ...) TO STDOUT``, the
  columns the relay sends) and one ``DELETE``. No Kafka.
* Kafka: confluent-kafka, idempotent, acks=all, producing the same records (topic,
  key, payload and the relay's three reserved headers) with the relay's linger,
  batch size and compression. No PostgreSQL.

* The pipeline (issue 10): both in one process, as a relay must do them. ``COPY`` out
  in id order, each row produced as it arrives, then one set ``DELETE`` once Kafka has
  acknowledged everything. PostgreSQL and Kafka share the machine's cores, so this is
  the ceiling that matters.

The relay can't beat the smaller of the first two, nor, on this machine, the pipeline.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from bench.backlog import Backlog, records
from bench.env import connect
from outbox_relay.config import KafkaConfig

READ_ALL = """
COPY (SELECT id, topic, message, key, partition_key, created_at, headers::text
      FROM kafka_messages ORDER BY id) TO STDOUT (FORMAT binary)
"""


class _CountingSink:
    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        return len(data)


@dataclass(frozen=True)
class PgLimit:
    rows: int
    read_s: float
    delete_s: float
    bytes_read: int

    @property
    def seconds(self) -> float:
        return self.read_s + self.delete_s

    @property
    def msgs_per_s(self) -> float:
        return self.rows / self.seconds


def postgres_limit(url: str) -> PgLimit:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*), coalesce(max(id), 0) FROM kafka_messages")
            rows, max_id = cur.fetchone()
            sink = _CountingSink()
            t0 = time.perf_counter()
            cur.copy_expert(READ_ALL, sink)
            t1 = time.perf_counter()
            cur.execute("DELETE FROM kafka_messages WHERE id <= %s", (max_id,))
            t2 = time.perf_counter()
    finally:
        conn.close()
    return PgLimit(rows=rows, read_s=t1 - t0, delete_s=t2 - t1, bytes_read=sink.bytes)


@dataclass(frozen=True)
class KafkaLimit:
    rows: int
    seconds: float

    @property
    def msgs_per_s(self) -> float:
        return self.rows / self.seconds


def librdkafka_producer_conf(bootstrap: str, kafka: KafkaConfig) -> dict[str, Any]:
    """The relay's producer settings in librdkafka's dialect."""
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": kafka.linger_ms,
        "batch.size": kafka.batch_size,
        "compression.type": kafka.compression_type,
        "message.max.bytes": kafka.max_request_size,
        "partitioner": "murmur2_random",  # the Java client's default, as the relay's sink
        "queue.buffering.max.kbytes": 1_048_576,
    }


Prepared = list[tuple[str, bytes, bytes, list[tuple[str, str | bytes | None]]]]


def kafka_limit(
    bootstrap: str, backlog: Backlog, kafka: KafkaConfig, repeats: int = 2
) -> KafkaLimit:
    """Best of `repeats` sends of the whole backlog (to fresh topics each time).

    The records and their headers are built before the clock starts: the limit is the
    producer's and the broker's, not Python's string formatting.
    """
    created = b"2026-01-01T00:00:00.000000Z"
    prepared: Prepared = [
        (topic, key, payload, [("outbox-relay.id", str(n).encode()),
                               ("outbox-relay.source", b"bench"),
                               ("outbox-relay.created-at", created)])
        for n, (topic, key, payload) in enumerate(records(backlog), start=1)
    ]
    best = float("inf")
    for attempt in range(repeats):
        suffix = f".r{attempt}" if attempt else ""
        best = min(best, _send_all(bootstrap, prepared, kafka, suffix))
    return KafkaLimit(rows=backlog.rows, seconds=best)


def _send_all(bootstrap: str, prepared: Prepared, kafka: KafkaConfig, suffix: str) -> float:
    producer = Producer(librdkafka_producer_conf(bootstrap, kafka))
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(err)

    t0 = time.perf_counter()
    for n, (topic, key, payload, headers) in enumerate(prepared):
        while True:
            try:
                producer.produce(topic + suffix, payload, key, headers=headers,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if n % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    seconds = time.perf_counter() - t0
    if left or failed:
        raise RuntimeError(f"Kafka limit run failed: {failed[:1]} {left} left")
    return seconds


READ_TO_SEND = """
COPY (SELECT id, topic, message, key, created_at::text FROM kafka_messages ORDER BY id)
TO STDOUT (FORMAT binary)
"""
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = len(_SIGNATURE) + 8  # flags and header-extension length, both int32


@dataclass(frozen=True)
class PipelineLimit:
    rows: int
    copy_and_produce_s: float
    flush_s: float
    delete_s: float

    @property
    def seconds(self) -> float:
        return self.copy_and_produce_s + self.flush_s + self.delete_s

    @property
    def msgs_per_s(self) -> float:
        return self.rows / self.seconds


class _ProducingSink:
    """Parses COPY's binary rows as psycopg2 hands over chunks, producing each row."""

    def __init__(self, producer: Producer, on_delivery: Any) -> None:
        self._producer = producer
        self._on_delivery = on_delivery
        self._buf = bytearray()
        self._pos = _HEADER
        self.rows = 0
        self.max_id = 0

    def write(self, data: bytes) -> int:
        self._buf += data
        self._drain()
        return len(data)

    def _drain(self) -> None:
        buf, pos = self._buf, self._pos
        while True:
            fields = self._row(buf, pos)
            if fields is None:
                break
            pos, (raw_id, topic, message, key, created) = fields
            if raw_id is None:  # the trailer (-1 fields)
                break
            row_id = struct.unpack(">q", raw_id)[0]
            headers: list[tuple[str, str | bytes | None]] = [
                ("outbox-relay.id", str(row_id).encode()),
                       ("outbox-relay.source", b"bench"),
                       ("outbox-relay.created-at", created or b"")]
            while True:
                try:
                    self._producer.produce((topic or b"").decode(), message, key,
                                           headers=headers, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self._producer.poll(0.01)
            self.rows += 1
            self.max_id = row_id
            if self.rows % 10_000 == 0:
                self._producer.poll(0)
        del buf[:pos]
        self._pos = 0

    @staticmethod
    def _row(buf: bytearray, pos: int) -> tuple[int, list[bytes | None]] | None:
        if len(buf) < pos + 2:
            return None
        count = struct.unpack_from(">h", buf, pos)[0]
        if count == -1:
            return pos + 2, [None] * 5
        pos += 2
        fields: list[bytes | None] = []
        for _ in range(count):
            if len(buf) < pos + 4:
                return None
            size = struct.unpack_from(">i", buf, pos)[0]
            pos += 4
            if size == -1:
                fields.append(None)
                continue
            if len(buf) < pos + size:
                return None
            fields.append(bytes(buf[pos:pos + size]))
            pos += size
        return pos, fields


def pipeline_limit(url: str, bootstrap: str, kafka: KafkaConfig) -> PipelineLimit:
    """COPY out, produce, one set delete: everything waiting in `url`'s outbox."""
    producer = Producer(librdkafka_producer_conf(bootstrap, kafka))
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(err)

    sink = _ProducingSink(producer, on_delivery)
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            t0 = time.perf_counter()
            cur.copy_expert(READ_TO_SEND, sink)
            t1 = time.perf_counter()
            left = producer.flush(300)
            t2 = time.perf_counter()
            if left or failed:
                raise RuntimeError(f"pipeline limit run failed: {failed[:1]} {left} left")
            cur.execute("DELETE FROM kafka_messages WHERE id <= %s", (sink.max_id,))
            t3 = time.perf_counter()
    finally:
        conn.close()
    return PipelineLimit(sink.rows, t1 - t0, t2 - t1, t3 - t2)
