"""The direct lane's words for a failed record agree with the failure rules both lanes
share (outbox_relay.stream.failures): what librdkafka refuses for good is poison to the
isolation and the policies, what may still be appended (a timeout, a purge in flight, a
fatal error) never is."""

from __future__ import annotations

from typing import cast

import pytest
from confluent_kafka import KafkaError, KafkaException

from outbox_relay.direct.send import NEVER_SENT, REFUSED_FOR_GOOD, Sent, _on_delivery, describe
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


class _PendingFatal:
    """A report as confluent-kafka makes the first one after the producer's fatal error:
    the fatal error is still pending, so the first call into it raises a SystemError
    caused by it (seen with the gap-less guarantee in the compaction test)."""

    def __init__(self, err: KafkaError, fatal: KafkaError) -> None:
        self._err = err
        self._fatal: KafkaError | None = fatal

    def code(self) -> int:
        fatal, self._fatal = self._fatal, None
        if fatal is not None:
            raise SystemError("returned a result with an exception set") from (
                KafkaException(fatal))
        return int(self._err.code())

    def __getattr__(self, name: str) -> object:
        return getattr(self._err, name)


def test_a_refusal_reported_with_the_fatal_error_pending_keeps_its_own_words() -> None:
    sent = Sent()
    gapless = KafkaError(KafkaError._GAPLESS_GUARANTEE, "unable to satisfy gap-less guarantee",
                         fatal=True)
    report = _PendingFatal(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), gapless)
    _on_delivery(sent, 7, cast("KafkaError", report), None)
    assert sent.refused_for_good == {7}
    assert "MSG_SIZE_TOO_LARGE" in sent.refused[7]
    assert sent.fatal is not None and "_GAPLESS_GUARANTEE" in sent.fatal
