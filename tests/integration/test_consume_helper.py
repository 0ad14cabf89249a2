"""The verification consumer that every integration test trusts reads everything Kafka
holds and fails on a consumer error, instead of stopping at the first quiet pause."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Producer

from outbox_relay.stack import StackInfo
from tests.integration.helpers import consume, create_topics, unique

pytestmark = pytest.mark.integration

ID = "outbox-relay.id"


def test_consume_reads_a_duplicate_that_becomes_readable_late(stack: StackInfo) -> None:
    topic = unique("late-dup")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    plain = Producer({"bootstrap.servers": stack.kafka_bootstrap})
    for i in (1, 2, 3):
        plain.produce(topic, value=b"v", key=b"k", partition=0, headers={ID: str(i)})
    assert plain.flush(30) == 0
    # A copy of id 2 in partition 1 that a read_committed consumer may read only once its
    # transaction commits: it is in the log, below the high watermark, but held back.
    late = Producer({"bootstrap.servers": stack.kafka_bootstrap,
                     "transactional.id": unique("late-dup-tx")})
    late.init_transactions(30)
    late.begin_transaction()
    late.produce(topic, value=b"v", key=b"k", partition=1, headers={ID: "2"})
    assert late.flush(30) == 0
    # Readable well after the three expected records, longer than any quiet period.
    committer = threading.Timer(5.0, late.commit_transaction, args=(30,))
    committer.start()
    try:
        got = consume(stack.kafka_bootstrap, [topic], expect=3)
    finally:
        committer.join(60)
    assert sorted(r.outbox_id for r in got) == [1, 2, 2, 3], "the late duplicate was missed"


def test_consume_fails_on_a_consumer_error(stack: StackInfo) -> None:
    with pytest.raises(AssertionError, match=r"(?i)unknown topic|not in metadata"):
        consume(stack.kafka_bootstrap, [unique("never-created")], expect=1, timeout_s=10)
