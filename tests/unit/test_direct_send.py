"""The direct lane's words for a failed record agree with the failure rules both lanes
share (outbox_relay.stream.failures): what librdkafka refuses for good is poison to the
isolation and the policies, what may still be appended (a timeout, a purge in flight, a
fatal error) never is."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from outbox_relay.direct.send import NEVER_SENT, REFUSED_FOR_GOOD, describe
from outbox_relay.stream.failures import failure_kind, refused_for_good


@pytest.mark.parametrize("code", sorted(REFUSED_FOR_GOOD))
def test_what_the_broker_refuses_for_good_is_poison_to_both_lanes(code: int) -> None:
    reason = describe(KafkaError(code))
    assert refused_for_good(reason), reason
    assert failure_kind(reason) in ("record", "topic"), reason


@pytest.mark.parametrize("code", [
    KafkaError._MSG_TIMED_OUT, KafkaError._PURGE_INFLIGHT, KafkaError._TRANSPORT,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._GAPLESS_GUARANTEE,
    KafkaError.REQUEST_TIMED_OUT, *sorted(NEVER_SENT),
])
def test_what_may_go_through_another_time_is_never_poison(code: int) -> None:
    reason = describe(KafkaError(code))
    assert not refused_for_good(reason), reason
