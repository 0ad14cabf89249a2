"""Contract: each named partitioner agrees with the real client it is named after.

One abstract contract, two implementations. A subclass only says how the real client
sends a keyed record without an explicit partition: ``murmur2`` through Spark's Kafka
sink (the Java producer's default partitioner), ``crc32`` through confluent-kafka with
librdkafka's ``consistent`` partitioner. The contract then checks, against a real
broker, that the pure-Python reference (`partition_for`), the Spark expression
(`partition_col`) and the relay itself put every key where that client puts it.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

import pytest
from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from outbox_relay.data.partitioning import Partitioner, partition_col, partition_for
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    insert,
    partitioning_bytes,
    unique,
)

pytestmark = pytest.mark.integration

PARTITIONS = 7

UNICODE_KEYS = [
    "ключ", "键-42", "🚀-order-1", "Ünïcödé", "e\u0301", "ñ" * 33, "עברית", "日本語のキー",
    "a\u200bb", "\U0001f600" * 5, "tab\there", "Ω≈ç√∫",
]


def _contract_keys() -> list[bytes]:
    """A few hundred keys: every tail length of murmur2's 4-byte blocks, random bytes of
    many lengths, and unicode strings as UTF-8."""
    rng = random.Random(20240607)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"abcde", b"\x00", b"\xff" * 4, b"\x80\x00\x7f"]
    keys += [rng.randbytes(n) for n in range(1, 80)]
    keys += [rng.randbytes(rng.randrange(1, 300)) for _ in range(250)]
    keys += [s.encode() for s in UNICODE_KEYS]
    keys += [f"customer-{i}".encode() for i in range(40)]
    assert len(set(keys)) == len(keys)
    return keys


KEYS = _contract_keys()
Record = tuple[bytes, bytes]


class PartitionerContract(ABC):
    """The tests every named partitioner must pass; subclasses bring the real client."""

    partitioner: ClassVar[Partitioner]
    other: ClassVar[Partitioner]

    @abstractmethod
    def produce(
        self, spark: SparkSession, bootstrap: str, topic: str, records: Sequence[Record]
    ) -> None:
        """Send (key, value) records with the real client, letting it pick each partition."""

    def real_partitions(
        self, stack: StackInfo, spark: SparkSession, keys: Sequence[bytes], partitions: int
    ) -> list[int]:
        """Where the real client puts each key, as seen by a consumer of a fresh topic."""
        topic = unique(f"probe-{self.partitioner}")
        create_topics(stack.kafka_bootstrap, {topic: partitions})
        self.produce(spark, stack.kafka_bootstrap, topic,
                     [(k, str(i).encode()) for i, k in enumerate(keys)])
        got = consume(stack.kafka_bootstrap, [topic], expect=len(keys))
        by_index = {int(r.value or b""): r for r in got}
        assert len(got) == len(keys) and sorted(by_index) == list(range(len(keys))), \
            "the probe topic should hold each record exactly once"
        for i, k in enumerate(keys):
            assert (by_index[i].key or b"") == k, f"record {i} came back with another key"
        return [by_index[i].partition for i in range(len(keys))]

    @pytest.fixture(scope="class")
    @classmethod
    def observed(cls, stack: StackInfo, spark: SparkSession) -> list[int]:
        """The real client's choice for every contract key, asked once per client."""
        return cls().real_partitions(stack, spark, KEYS, PARTITIONS)

    def test_probe_spreads_keys_over_every_partition(self, observed: list[int]) -> None:
        # Otherwise a partitioner that always said 0 could pass the contract.
        assert set(observed) == set(range(PARTITIONS))
        assert min(Counter(observed).values()) >= len(KEYS) // PARTITIONS // 3

    def test_reference_agrees_with_real_client(self, observed: list[int]) -> None:
        predicted = [partition_for(self.partitioner, k, PARTITIONS) for k in KEYS]
        wrong = [(k, p, o) for k, p, o in zip(KEYS, predicted, observed, strict=True) if p != o]
        assert not wrong, f"{len(wrong)} keys disagree (key, predicted, real): {wrong[:5]}"

    def test_spark_expression_agrees_with_real_client(
        self, spark: SparkSession, observed: list[int]
    ) -> None:
        df = spark.createDataFrame(list(enumerate(KEYS)), "i int, k binary")
        rows = df.select(
            "i", partition_col(self.partitioner, F.col("k"), F.lit(PARTITIONS)).alias("p")
        ).collect()
        predicted = {r.i: r.p for r in rows}
        wrong = [(KEYS[i], predicted[i], o) for i, o in enumerate(observed) if predicted[i] != o]
        assert not wrong, f"{len(wrong)} keys disagree (key, expression, real): {wrong[:5]}"

    def test_the_other_partitioner_would_not_pass(self, observed: list[int]) -> None:
        # The probe tells the two hash functions apart, so agreement above means something.
        other = [partition_for(self.other, k, PARTITIONS) for k in KEYS]
        differ = sum(o != p for o, p in zip(other, observed, strict=True))
        assert differ > len(KEYS) // 2

    def test_relay_puts_each_record_where_the_real_client_would(
        self, stack: StackInfo, spark: SparkSession, migrated_url: str,
        make_config: ConfigFactory, run_relay: RelayRunner,
    ) -> None:
        """partition_key decides when present (as UTF-8 bytes), else the key."""
        topic = unique(f"relay-{self.partitioner}")
        create_topics(stack.kafka_bootstrap, {topic: PARTITIONS})
        rng = random.Random(7)
        with_pk = [
            Msg(topic, rng.randbytes(rng.randrange(1, 40)), f"v{i}".encode(),
                partition_key=f"{UNICODE_KEYS[i % len(UNICODE_KEYS)]}-{i % 25}")
            for i in range(150)
        ]
        without_pk = [
            Msg(topic, rng.choice([f"user-{i % 30}".encode(), rng.randbytes(12)]), f"w{i}".encode())
            for i in range(80)
        ]
        rows = with_pk + without_pk
        rng.shuffle(rows)
        ids = insert(migrated_url, [rows[i:i + 10] for i in range(0, len(rows), 10)])
        by_id = dict(zip(ids, rows, strict=True))

        # Ask the real client first, for every partition_key and every key.
        probe = sorted({m.partition_key.encode() for m in with_pk if m.partition_key}
                       | {m.key for m in rows if m.key is not None})
        real = dict(zip(probe, self.real_partitions(stack, spark, probe, PARTITIONS), strict=True))

        def deciding(m: Msg) -> bytes:
            assert m.key is not None
            pbytes = partitioning_bytes(m.partition_key, m.key)
            assert pbytes is not None  # m.key is not None
            return pbytes

        # Rows whose key alone would land elsewhere: the test notices an ignored partition_key.
        assert sum(real[m.key] != real[deciding(m)] for m in with_pk if m.key) > 50

        result = run_relay(make_config([topic], relay={"partitioner": self.partitioner}))

        assert result.exit_code == EXIT_OK
        got = consume(stack.kafka_bootstrap, [topic], expect=len(ids))
        assert sorted(r.outbox_id for r in got) == sorted(ids)
        misplaced = [
            (r.outbox_id, by_id[r.outbox_id].partition_key, r.partition,
             real[deciding(by_id[r.outbox_id])])
            for r in got if r.partition != real[deciding(by_id[r.outbox_id])]
        ]
        assert not misplaced, (
            f"{len(misplaced)} records not where {type(self).__name__}'s client puts them "
            f"(id, partition_key, got, real): {misplaced[:5]}"
        )
        for r in got:
            assert r.key == by_id[r.outbox_id].key, "the record key is the row's key"
        placed_without_pk = [r for r in got if by_id[r.outbox_id].partition_key is None]
        assert len(placed_without_pk) == len(without_pk)


class TestMurmur2IsTheJavaProducer(PartitionerContract):
    """murmur2: the Java producer's default partitioner, reached through Spark's Kafka sink."""

    partitioner = "murmur2"
    other = "crc32"

    def produce(
        self, spark: SparkSession, bootstrap: str, topic: str, records: Sequence[Record]
    ) -> None:
        df = spark.createDataFrame(list(records), "key binary, value binary")
        (df.write.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic)
         .save())


class TestCrc32IsLibrdkafkaConsistent(PartitionerContract):
    """crc32: librdkafka's `consistent` partitioner, through confluent-kafka's Producer."""

    partitioner = "crc32"
    other = "murmur2"

    def produce(
        self, spark: SparkSession, bootstrap: str, topic: str, records: Sequence[Record]
    ) -> None:
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "consistent",
                             "enable.idempotence": True})
        for key, value in records:
            producer.produce(topic, key=key, value=value, on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(30) == 0, "not every record was delivered"
        assert not errors, errors[:3]
