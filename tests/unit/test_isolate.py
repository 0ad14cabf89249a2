from __future__ import annotations

import math

from relay.stream.failures import refused_for_good
from relay.stream.isolate import isolate

TOO_LARGE = "org.apache.kafka.common.errors.RecordTooLargeException: too big"
TIMEOUT = "org.apache.kafka.common.errors.TimeoutException: expired"


def _sender(bad: set[int], log: list[tuple[int, int]], reason: str = TOO_LARGE):
    def send(first: int, last: int) -> str | None:
        log.append((first, last))
        return reason if any(first <= b <= last for b in bad) else None

    return send


def test_finds_the_first_poison_message_in_log_sends() -> None:
    ids = list(range(100, 1124))
    log: list[tuple[int, int]] = []
    result = isolate(ids, TOO_LARGE, _sender({777, 900}, log))
    assert result.culprit == 777 and result.poison
    assert result.delivered == list(range(100, 777))
    assert len(log) <= math.ceil(math.log2(len(ids))) + 1
    assert result.attempts == len(log) + 1
    # Only messages before the culprit were ever re-sent, never one after it.
    assert all(first < 777 or first == 777 for first, _ in log)


def test_single_message() -> None:
    result = isolate([5], TOO_LARGE, _sender({5}, []))
    assert result.culprit == 5 and result.delivered == [] and result.attempts == 1


def test_an_outage_is_never_poison() -> None:
    log: list[tuple[int, int]] = []
    result = isolate(list(range(10)), TIMEOUT, _sender({3}, log, TIMEOUT))
    assert log == [] and not result.poison and result.delivered == []


def test_outage_mid_isolation_stops_narrowing() -> None:
    calls: list[tuple[int, int]] = []

    def send(first: int, last: int) -> str | None:
        calls.append((first, last))
        return TIMEOUT

    result = isolate(list(range(16)), TOO_LARGE, send)
    assert len(calls) == 1 and not result.poison


def test_classification() -> None:
    assert refused_for_good(TOO_LARGE)
    assert refused_for_good("org.apache.kafka.common.errors.InvalidTopicException: bad")
    assert not refused_for_good(TIMEOUT)
    assert not refused_for_good("Kafka unavailable: cannot reach Kafka")


def test_the_culprit_is_confirmed_alone_for_its_own_reason() -> None:
    sibling = (
        "org.apache.kafka.common.KafkaException: "
        "part of a batch which had one more more invalid records"
    )
    own = "org.apache.kafka.common.InvalidRecordException: no key"

    def send(first: int, last: int) -> str | None:
        if not first <= 6 <= last:
            return None
        return own if first == last == 6 else sibling

    result = isolate(list(range(1, 12)), sibling, send)
    assert result.culprit == 6 and result.poison and result.reason == own
    assert result.delivered == [1, 2, 3, 4, 5]


def test_a_culprit_that_goes_through_alone_is_not_poison() -> None:
    calls = iter([TOO_LARGE, None, None, None])
    result = isolate(list(range(4)), TOO_LARGE, lambda a, b: next(calls))
    assert result.culprit is None and not result.poison


def test_a_denied_acl_is_an_outage_not_poison() -> None:
    denied = ("org.apache.kafka.common.errors.TopicAuthorizationException: "
              "Not authorized to access topics: [orders]")
    assert not refused_for_good(denied)
    result = isolate(list(range(8)), denied, _sender(set(range(8)), []))
    assert not result.poison and result.attempts == 1
