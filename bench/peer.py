"""THE PEER: Deimos v2's database-backend producer, faithfully, with psycopg2 + confluent-kafka.

What Deimos v2 (``Deimos::Utils::DbProducer``) does, on one thread:

* find the distinct topics of ``kafka_messages``;
* for each: insert its ``kafka_topic_info`` row if missing, then lock it with one
  ``UPDATE ... WHERE topic = ? AND ((locked_by IS NULL AND error = false) OR
  locked_at < one minute ago)`` using the host's clock, as Deimos does;
* while the last batch was full: select the first 1000 rows of the topic in id
  order, produce them synchronously (acks=all, idempotent: produce, then flush), delete the
  sent ids in groups of 10 (``DELETE_BATCH_SIZE``), heartbeat ``locked_at``;
* release the lock (or register the error), move on; after all topics, update
  ``last_processed_at`` of the idle ones and sleep 0.5 s.

Each row is sent as Deimos sends it: its key, its user headers, and, when it has a
``partition_key``, to the partition that key picks (crc32, as Deimos's producer does).

Every statement autocommits, as ActiveRecord does outside a transaction. Bench only;
never used by the product.

Run as its own process: ``python -m bench.peer --url ... --bootstrap ... [--drain]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import sys
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.extensions
from confluent_kafka import KafkaError, Message, Producer

BATCH_SIZE = 1000
DELETE_BATCH_SIZE = 10
IDLE_SLEEP_S = 0.5
LOCK_EXPIRY = dt.timedelta(minutes=1)

DISTINCT_TOPICS = "SELECT DISTINCT topic FROM kafka_messages"
CREATE_TOPIC_INFO = """
INSERT INTO kafka_topic_info (topic, last_processed_at) VALUES (%s, %s)
ON CONFLICT (topic) DO NOTHING
"""
LOCK = """
UPDATE kafka_topic_info SET locked_by = %(id)s, locked_at = %(now)s, error = false
WHERE topic = %(topic)s
  AND ((locked_by IS NULL AND error = false) OR locked_at < %(expired)s)
"""
IS_LOCKED = "SELECT 1 FROM kafka_topic_info WHERE locked_by = %s AND topic = %s LIMIT 1"
RETRIEVE = """
SELECT id, topic, message, key, partition_key, headers FROM kafka_messages
WHERE topic = %s ORDER BY id LIMIT %s
"""
DELETE = "DELETE FROM kafka_messages WHERE topic = %s AND id IN %s"
HEARTBEAT = "UPDATE kafka_topic_info SET locked_at = %s WHERE topic = %s AND locked_by = %s"
CLEAR_LOCK = """
UPDATE kafka_topic_info
SET locked_by = NULL, locked_at = NULL, error = false, retries = 0, last_processed_at = %s
WHERE topic = %s AND locked_by = %s
"""
REGISTER_ERROR = """
UPDATE kafka_topic_info
SET locked_by = NULL, locked_at = NULL, error = true, retries = retries + 1
WHERE topic = %s AND locked_by = %s
"""
PING_EMPTY = """
UPDATE kafka_topic_info SET last_processed_at = %s
WHERE NOT (topic = ANY(%s::varchar[])) AND locked_by IS NULL
"""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)  # Deimos: Time.zone.now, UTC


@dataclass
class PeerStats:
    sent: int = 0
    batches: int = 0
    errors: int = 0
    passes: int = 0
    seconds: dict[str, float] = field(
        default_factory=lambda: {"topics": 0.0, "lock": 0.0, "select": 0.0, "produce": 0.0,
                                 "delete": 0.0, "heartbeat": 0.0, "release": 0.0}
    )


class DbProducer:
    def __init__(self, url: str, bootstrap: str) -> None:
        self.id = str(uuid.uuid4())
        self.conn: psycopg2.extensions.connection = psycopg2.connect(url)
        self.conn.autocommit = True
        # Deimos produces synchronously with all-broker acks. Idempotence is on, as the
        # relay has it (issue 10: the peer pays for the same guarantee); no compression,
        # Deimos's default. librdkafka's `consistent` partitioner is crc32, as
        # ruby-kafka's default is.
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "partitioner": "consistent",
                "linger.ms": 5,
            }
        )
        self._partitions: dict[str, int] = {}
        self.stats = PeerStats()
        self.stopping = False
        self._failed: list[KafkaError] = []

    def _timed(self, phase: str, started: float) -> None:
        self.stats.seconds[phase] += time.perf_counter() - started

    def process_next_messages(self) -> list[str]:
        t = time.perf_counter()
        with self.conn.cursor() as cur:
            cur.execute(DISTINCT_TOPICS)
            topics = [r[0] for r in cur.fetchall()]
        self._timed("topics", t)
        for topic in topics:
            if self.stopping:
                break
            self.process_topic(topic)
        with self.conn.cursor() as cur:
            cur.execute(PING_EMPTY, (_now(), topics))
        self.stats.passes += 1
        return topics

    def lock(self, topic: str) -> bool:
        t = time.perf_counter()
        now = _now()
        with self.conn.cursor() as cur:
            cur.execute(CREATE_TOPIC_INFO, (topic, now))
            cur.execute(LOCK, {"id": self.id, "now": now, "topic": topic,
                               "expired": now - LOCK_EXPIRY})
            cur.execute(IS_LOCKED, (self.id, topic))
            locked = cur.fetchone() is not None
        self._timed("lock", t)
        return locked

    def process_topic(self, topic: str) -> None:
        if not self.lock(topic):
            return
        try:
            while not self.stopping and self.process_topic_batch(topic):
                pass
        except Exception as exc:
            print(f"peer: error on topic {topic}: {exc}", file=sys.stderr)
            self.stats.errors += 1
            with self.conn.cursor() as cur:
                cur.execute(REGISTER_ERROR, (topic, self.id))
            return
        t = time.perf_counter()
        with self.conn.cursor() as cur:
            cur.execute(CLEAR_LOCK, (_now(), topic, self.id))
        self._timed("release", t)

    def process_topic_batch(self, topic: str) -> bool:
        t = time.perf_counter()
        with self.conn.cursor() as cur:
            cur.execute(RETRIEVE, (topic, BATCH_SIZE))
            messages = cur.fetchall()
        self._timed("select", t)
        if not messages:
            return False
        t = time.perf_counter()
        self.produce(messages)
        self._timed("produce", t)
        t = time.perf_counter()
        self.delete(topic, [m[0] for m in messages])
        self._timed("delete", t)
        self.stats.sent += len(messages)
        self.stats.batches += 1
        if len(messages) < BATCH_SIZE:
            return False
        t = time.perf_counter()
        with self.conn.cursor() as cur:
            cur.execute(HEARTBEAT, (_now(), topic, self.id))
        self._timed("heartbeat", t)
        return True

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failed.append(err)

    def _partition_of(self, topic: str, partition_key: str) -> int:
        """Deimos hands `partition_key` to its producer, which partitions by it, not by the
        key: crc32 modulo the partition count (ruby-kafka's default; rdkafka's
        `consistent`, as set above). The count is fetched once per topic."""
        if topic not in self._partitions:
            meta = self.producer.list_topics(topic, timeout=30).topics[topic]
            self._partitions[topic] = len(meta.partitions)
        return zlib.crc32(partition_key.encode()) % self._partitions[topic]

    def produce(self, messages: list[tuple[Any, ...]]) -> None:
        self._failed.clear()
        for _id, topic, message, key, partition_key, headers in messages:
            kwargs: dict[str, Any] = {"value": bytes(message) if message is not None else None}
            if key is not None or partition_key is not None:
                kwargs["key"] = bytes(key) if key is not None else partition_key.encode()
            if partition_key is not None and key is not None:
                kwargs["partition"] = self._partition_of(topic, partition_key)
            if headers:  # jsonb of string values, decoded by psycopg2
                kwargs["headers"] = [(k, str(v).encode()) for k, v in headers.items()]
            while True:
                try:
                    self.producer.produce(topic, on_delivery=self._on_delivery, **kwargs)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        remaining = self.producer.flush(60)
        if remaining or self._failed:
            raise RuntimeError(f"send failed: {self._failed[:1] or f'{remaining} unsent'}")

    def delete(self, topic: str, ids: list[int]) -> None:
        with self.conn.cursor() as cur:
            for i in range(0, len(ids), DELETE_BATCH_SIZE):
                cur.execute(DELETE, (topic, tuple(ids[i : i + DELETE_BATCH_SIZE])))

    def run(self, drain: bool) -> None:
        while not self.stopping:
            topics = self.process_next_messages()
            if drain and not topics:
                break
            time.sleep(IDLE_SLEEP_S)

    def close(self) -> None:
        self.producer.flush(10)
        self.conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.peer")
    p.add_argument("--url", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--drain", action="store_true", help="exit once a pass finds no topics")
    p.add_argument("--stats", help="write the phase timings here as JSON")
    args = p.parse_args(argv)
    peer = DbProducer(args.url, args.bootstrap)

    def on_term(signum: int, frame: Any) -> None:
        peer.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    started = time.monotonic()
    try:
        peer.run(args.drain)
    finally:
        peer.close()
    if args.stats:
        with open(args.stats, "w", encoding="utf-8") as out:
            json.dump({"sent": peer.stats.sent, "batches": peer.stats.batches,
                       "errors": peer.stats.errors, "passes": peer.stats.passes,
                       "seconds": peer.stats.seconds,
                       "wall_s": time.monotonic() - started}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
