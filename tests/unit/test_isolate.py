from __future__ import annotations

import itertools
import math

from outbox_relay.stream.failures import refused_for_good
from outbox_relay.stream.isolate import isolate

TOO_LARGE = "org.apache.kafka.common.errors.RecordTooLargeException: too big"
TIMEOUT = "org.apache.kafka.common.errors.TimeoutException: expired"


def _sender(bad: set[int], log: list[tuple[int, int]], reason: str = TOO_LARGE):
    def send(first: int, last: int) -> str | None:
        log.append((first, last))
        return reason if any(first <= b <= last for b in bad) else None

    return send


def _send_ranges(ids: list[int], log: list[tuple[int, int]]) -> list[list[int]]:
    """Each logged send as the run of `ids` it covered; fails unless it is such a run."""
    runs = []
    for first, last in log:
        assert first in ids and last in ids and first <= last, (first, last)
        runs.append(ids[ids.index(first) : ids.index(last) + 1])
    return runs


def test_finds_the_first_poison_message_in_log_sends() -> None:
    ids = list(range(100, 1124))
    log: list[tuple[int, int]] = []
    result = isolate(ids, TOO_LARGE, _sender({777, 900}, log))
    assert result.culprit == 777 and result.poison
    assert result.delivered == list(range(100, 777))
    assert len(log) <= math.ceil(math.log2(len(ids))) + 1
    assert result.attempts == len(log) + 1
    runs = _send_ranges(ids, log)
    went_through = [r for r in runs if 777 not in r]
    failed = [r for r in runs if 777 in r]
    # Every send that went through lay wholly before the culprit: only messages before it
    # are delivered twice, and each of them once more at most (the sends are disjoint and
    # together are exactly the delivered prefix, in id order).
    assert all(r[-1] < 777 for r in went_through)
    assert [i for r in went_through for i in r] == result.delivered
    # Each send starts at the first message not yet delivered: none is skipped, and the
    # search never goes back over what went through.
    delivered = 0
    for first, r in zip((f for f, _ in log), runs, strict=True):
        assert first == ids[delivered]
        delivered += len(r) if 777 not in r else 0
    # Each failed send held the culprit, and each was narrower than the one before it.
    # Ids after the culprit travel only in these failed sends: bisection cannot keep them
    # out, so "never one after it" holds for delivered sends, not for every send.
    assert all(len(a) > len(b) for a, b in itertools.pairwise(failed))
    # The search ends with the culprit sent alone, for its own reason.
    assert log[-1] == (777, 777)


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
    # One send of the first half, then no narrowing during the outage.
    assert calls == [(0, 7)] and not result.poison
    assert result.culprit is None and result.delivered == [] and result.attempts == 2


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
