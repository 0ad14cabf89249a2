"""Kafka trouble that is not the rows' fault never parks them; topology changes are seen.

An authorization failure or a topic the broker has not reported missing for long
enough is an outage: the topic backs off in error, its rows stay in the outbox.
"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka.admin import AclOperation, AdminClient, NewPartitions

from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique, wait_for
from tests.integration.sasl_broker import (
    ADMIN,
    RELAY,
    SaslBroker,
    sasl_broker_fixture,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.integration

PARK = {"topic_rules": [{"match": ".*", "policy": "park"}]}
TOPIC_STATE = "SELECT error, last_error, next_retry_at FROM kafka_topic_info WHERE topic = %s"
LEFT = "SELECT count(*) FROM kafka_messages WHERE topic = %s"
PARKED = "SELECT topic, count(*) FROM relay_parked_messages GROUP BY topic"


def test_topics_the_acl_denies_back_off_under_park_while_the_allowed_one_flows(
    sasl_broker: SaslBroker, migrated_url: str, make_config: ConfigFactory,
    run_relay: RelayRunner,
) -> None:
    allowed, hidden, read_only = unique("allowed"), unique("hidden"), unique("readonly")
    sasl_broker.create_topics({allowed: 2, hidden: 1, read_only: 1})
    sasl_broker.allow(RELAY, allowed, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                      AclOperation.WRITE)
    # Metadata yes, writes no: only the producer's send is refused.
    sasl_broker.allow(RELAY, read_only, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
    insert(migrated_url, [[Msg(t, f"k{i}".encode(), f"{t}-{i}".encode())
                           for t in (allowed, hidden, read_only)] for i in range(5)])
    config = make_config(
        [allowed, hidden, read_only], relay={**PARK, "available_now_deadline_s": 2},
        kafka={"bootstrap_servers": sasl_broker.bootstrap,
               "java_options": sasl_broker.java_conf(RELAY),
               "librdkafka_options": sasl_broker.librdkafka_conf(RELAY)},
    )

    result = run_relay(config)

    assert query(migrated_url, PARKED) == []
    got = consume(sasl_broker.bootstrap, [allowed], expect=5,
                  conf=sasl_broker.librdkafka_conf(ADMIN))
    # At least once: the first, shared write failed after some of it went through.
    assert sorted({r.value for r in got}) == [f"{allowed}-{i}".encode() for i in range(5)]
    assert result.exit_code != EXIT_OK
    for topic in (hidden, read_only):
        assert query(migrated_url, LEFT, (topic,))[0][0] == 5
        error, reason, next_retry = query(migrated_url, TOPIC_STATE, (topic,))[0]
        assert error is True and next_retry is not None
        assert "authoriz" in reason.lower(), reason


def test_a_missing_topic_counts_as_missing_only_after_the_grace_period(
    migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    parked, blocked = unique("gone-park"), unique("gone-block")
    insert(migrated_url, [[Msg(parked, b"k", b"p1"), Msg(blocked, b"k", b"b1")]])
    rules = {"topic_rules": [{"match": "gone-park.*", "policy": "park"}],
             "available_now_deadline_s": 2}

    young = run_relay(make_config([parked, blocked], relay=rules,
                                  kafka={"missing_topic_grace_s": 3600}))

    assert young.exit_code != EXIT_OK
    assert query(migrated_url, PARKED) == []
    for topic in (parked, blocked):
        error, reason, _ = query(migrated_url, TOPIC_STATE, (topic,))[0]
        assert error is True and "does not exist" in reason, reason
        assert query(migrated_url, LEFT, (topic,))[0][0] == 1

    # The database clock, which measures the grace, moves past one second.
    assert wait_for(lambda: query(
        migrated_url, "SELECT bool_and(now() AT TIME ZONE 'UTC' - missing_since "
        "> interval '1 second') FROM kafka_topic_info WHERE topic IN (%s, %s)",
        (parked, blocked))[0][0] is True, timeout_s=30)
    old = run_relay(make_config([parked, blocked], name="again", relay=rules,
                                kafka={"missing_topic_grace_s": 1}))

    assert old.exit_code != EXIT_OK
    assert query(migrated_url, PARKED) == [(parked, 1)]
    assert query(migrated_url, LEFT, (blocked,))[0][0] == 1
    error, reason, _ = query(migrated_url, TOPIC_STATE, (blocked,))[0]
    assert error is True and "does not exist" in reason, reason


def test_partitions_added_while_no_relay_ran_are_noticed_and_stored(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique("grown")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    insert(migrated_url, [[Msg(topic, f"k{i}".encode(), b"before") for i in range(4)]])
    assert run_relay(make_config([topic])).exit_code == EXIT_OK

    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, 5)]).values():
        future.result()
    assert wait_for(lambda: len(admin.list_topics(topic, timeout=10)
                                .topics[topic].partitions) == 5, timeout_s=30)
    insert(migrated_url, [[Msg(topic, f"k{i}".encode(), b"after") for i in range(4)]])
    caplog.set_level(logging.WARNING, logger="outbox_relay.stream.topic_check")

    assert run_relay(make_config([topic], name="restarted")).exit_code == EXIT_OK

    changes = [r.getMessage() for r in caplog.records if "partitions" in r.getMessage()]
    assert any(topic in m and "from 2 to 5" in m for m in changes), changes
    assert query(migrated_url, "SELECT partition_count FROM kafka_topic_info "
                 "WHERE topic = %s", (topic,)) == [(5,)]
