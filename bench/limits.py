"""THE LIMITS: what PostgreSQL alone and Kafka alone can do with the same payloads.

* PostgreSQL: one set-based read of every row (``COPY (SELECT ...) TO STDOUT``, the
  columns the relay sends) and one ``DELETE``. No Kafka.
* Kafka: confluent-kafka, idempotent, acks=all, producing the same records (topic,
  key, payload and the relay's three reserved headers) with the relay's linger,
  batch size and compression. No PostgreSQL.

The relay can't beat the smaller of the two.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from bench.backlog import Backlog, records
from bench.env import connect
from relay.config import KafkaConfig

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
