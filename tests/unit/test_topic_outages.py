"""Which topic-level metadata errors may ever make rows doomed: only "unknown topic"."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from outbox_relay.config.load import build_config
from outbox_relay.control.kafka_admin import topic_unavailable
from outbox_relay.errors import ConfigError


def test_only_an_unknown_topic_can_count_as_missing() -> None:
    missing = topic_unavailable("t", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert missing.missing and "does not exist" in missing.reason


@pytest.mark.parametrize("code", [
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,
])
def test_other_metadata_errors_are_outages(code: int) -> None:
    outage = topic_unavailable("orders", KafkaError(code))
    assert not outage.missing and "orders" in outage.reason


def test_a_topic_without_partitions_yet_is_an_outage() -> None:
    assert not topic_unavailable("t", None).missing


def test_an_authorization_failure_says_so() -> None:
    reason = topic_unavailable("t", KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)).reason
    assert "not authorized" in reason and "Describe and Write" in reason


def test_missing_topic_grace_defaults_and_is_validated() -> None:
    assert build_config({}, env={}).kafka.missing_topic_grace_s == 60
    assert build_config({"kafka": {"missing_topic_grace_s": 0}},
                        env={}).kafka.missing_topic_grace_s == 0
    with pytest.raises(ConfigError, match=r"^invalid config key kafka\.missing_topic_grace_s"):
        build_config({"kafka": {"missing_topic_grace_s": -1}}, env={})
