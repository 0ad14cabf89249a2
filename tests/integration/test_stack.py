"""The local stack really runs PostgreSQL and Kafka, reachable over TCP on loopback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import psycopg2
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import outbox_relay.stack
from outbox_relay.stack import StackInfo

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(stack: StackInfo) -> Iterator[str]:
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    name = f"stack-test-{uuid.uuid4().hex[:12]}"
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)
    yield name
    admin.delete_topics([name])[name].result(30)


def _select(url: str, sql: str) -> tuple[object, ...]:
    conn = psycopg2.connect(url, connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            assert row is not None
            return tuple(row)
    finally:
        conn.close()


def test_postgres_answers_sql_over_tcp_on_loopback(stack: StackInfo) -> None:
    assert urlparse(stack.postgres_url).hostname == "127.0.0.1"
    conn = psycopg2.connect(stack.postgres_url, connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT host(inet_server_addr()), current_setting('max_connections')")
            assert cur.fetchone() == ("127.0.0.1", "1000")
            cur.execute("CREATE TEMP TABLE t (id int PRIMARY KEY, body jsonb)")
            cur.execute("INSERT INTO t VALUES (1, %s)", ('{"a": 1}',))
            cur.execute("SELECT body->>'a' FROM t WHERE id = 1")
            assert cur.fetchone() == ("1",)
    finally:
        conn.close()


def test_created_topic_round_trips_a_message(stack: StackInfo, topic: str) -> None:
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "acks": "all"})
    errors: list[KafkaError | None] = []
    producer.produce(topic, key=b"k1", value=b"hello", on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(30) == 0
    assert errors == [None]

    consumer = Consumer(
        {
            "bootstrap.servers": stack.kafka_bootstrap,
            "group.id": f"stack-test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        message = None
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None
        assert (message.key(), message.value()) == (b"k1", b"hello")
    finally:
        consumer.close()


def test_topics_are_not_auto_created(stack: StackInfo) -> None:
    missing = f"stack-missing-{uuid.uuid4().hex[:12]}"
    # Asking for a topic by name is what would auto-create it if that were enabled.
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    error = admin.list_topics(topic=missing, timeout=10).topics[missing].error
    assert error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    producer = Producer(
        {
            "bootstrap.servers": stack.kafka_bootstrap,
            "message.timeout.ms": 5000,
            "topic.metadata.propagation.max.ms": 1000,
        }
    )
    errors: list[KafkaError | None] = []
    producer.produce(missing, value=b"x", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None
    assert missing not in admin.list_topics(timeout=10).topics


def test_up_twice_returns_the_same_info(stack: StackInfo) -> None:
    assert outbox_relay.stack.up() == stack
    assert outbox_relay.stack.status() == stack


def test_env_lines_export_both_addresses(stack: StackInfo) -> None:
    assert stack.env_lines() == [
        f"export RELAY_POSTGRES_URL={stack.postgres_url}",
        f"export RELAY_KAFKA_BOOTSTRAP_SERVERS={stack.kafka_bootstrap}",
    ]


def test_private_stack_restarts_each_service_on_its_ports(tmp_path: Path) -> None:
    stack_dir = tmp_path / "stack"
    try:
        info = outbox_relay.stack.up(stack_dir, use_env=False)
        outbox_relay.stack.stop_kafka(stack_dir, hard=True)
        assert outbox_relay.stack.status(stack_dir, use_env=False) is None
        assert outbox_relay.stack.start_kafka(stack_dir) == info.kafka_bootstrap

        outbox_relay.stack.stop_postgres(stack_dir)
        with pytest.raises(psycopg2.OperationalError):
            _select(info.postgres_url, "SELECT 1")
        assert outbox_relay.stack.start_postgres(stack_dir) == info.postgres_url
        assert _select(info.postgres_url, "SELECT 1") == (1,)
        assert outbox_relay.stack.status(stack_dir, use_env=False) == info
    finally:
        outbox_relay.stack.down(stack_dir)
    assert outbox_relay.stack.status(stack_dir, use_env=False) is None
    outbox_relay.stack.down(stack_dir)  # idempotent
