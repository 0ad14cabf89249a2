from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from outbox_relay.stream.topic_bisect import bisect_topics, named_topics

INVALID = "org.apache.kafka.common.InvalidRecordException: no key in topic partition {}-0"
TIMEOUT = "org.apache.kafka.common.errors.TimeoutException: Expiring 3 record(s) for {}-0"


class Kafka:
    """A fake write: fails when the group holds a bad topic, naming the first one."""

    def __init__(self, bad: set[str], reason: str = INVALID) -> None:
        self.bad, self.reason = bad, reason
        self.sends: list[list[str]] = []
        self.lost: set[str] = set()

    def send(self, topics: Sequence[str]) -> str | None:
        self.sends.append(list(topics))
        culprits = sorted(self.bad & set(topics))
        return self.reason.format(culprits[0]) if culprits else None


def _topics(n: int) -> list[str]:
    return [f"t{i:04d}" for i in range(n)]


def test_one_bad_topic_among_many_costs_about_2_log2_n_sends() -> None:
    topics = _topics(1000)
    for bad in ("t0000", "t0499", "t0500", "t0999"):
        kafka = Kafka({bad})
        result = bisect_topics(topics, INVALID.format(bad), kafka.send)
        assert result.failing == {bad: INVALID.format(bad)}
        assert sorted(result.acknowledged) == [t for t in topics if t != bad]
        assert len(kafka.sends) <= 2 * math.ceil(math.log2(1000)), (bad, len(kafka.sends))
        assert result.attempts == len(kafka.sends)
        # A failed write still delivers its healthy topics: no topic is sent more often
        # than the depth of the search.
        sent = Counter(t for group in kafka.sends for t in group)
        assert max(sent.values()) <= math.ceil(math.log2(1000)) + 1
        assert sum(sent.values()) < 3 * len(topics)


def test_several_bad_topics_are_each_found() -> None:
    topics = _topics(64)
    bad = {"t0003", "t0004", "t0040"}
    kafka = Kafka(bad)
    result = bisect_topics(topics, INVALID.format("t0003"), kafka.send)
    assert set(result.failing) == bad
    assert sorted(result.acknowledged) == sorted(set(topics) - bad)
    assert len(kafka.sends) < 64


def test_a_right_name_in_the_error_costs_one_send() -> None:
    topics = _topics(100)
    kafka = Kafka({"t0042"})
    result = bisect_topics(topics, INVALID.format("t0042"), kafka.send, named={"t0042"})
    # The one write of the others is the only extra copy a healthy topic gets.
    assert kafka.sends == [[t for t in topics if t != "t0042"]]
    assert result.failing == {"t0042": INVALID.format("t0042")}
    assert sorted(result.acknowledged) == [t for t in topics if t != "t0042"]


def test_a_wrong_name_is_only_a_hint_and_bisection_still_finds_the_bad_topic() -> None:
    topics = _topics(100)
    kafka = Kafka({"t0042"})
    result = bisect_topics(topics, INVALID.format("t0042"), kafka.send, named={"t0007"})
    assert result.failing == {"t0042": INVALID.format("t0042")}
    assert sorted(result.acknowledged) == [t for t in topics if t != "t0042"]
    assert "t0007" in result.acknowledged, "the named topic was sent and went through"
    assert len(kafka.sends) <= 2 + 2 * math.ceil(math.log2(100))


def test_a_right_name_and_another_bad_topic_finds_both() -> None:
    topics = _topics(64)
    kafka = Kafka({"t0003", "t0050"})
    result = bisect_topics(topics, INVALID.format("t0003"), kafka.send, named={"t0003"})
    assert set(result.failing) == {"t0003", "t0050"}
    assert sorted(result.acknowledged) == sorted(set(topics) - {"t0003", "t0050"})
    assert len(kafka.sends) <= 2 + 2 * math.ceil(math.log2(64))


def test_an_outage_stops_the_search_at_once() -> None:
    topics = _topics(32)
    kafka = Kafka(set(topics), TIMEOUT)
    checks: list[str] = []

    def outage(reason: str) -> str | None:
        checks.append(reason)
        return "Kafka unavailable: no broker"

    result = bisect_topics(topics, INVALID.format("t0001"), kafka.send, outage=outage)
    assert len(kafka.sends) == 1 and len(checks) == 1
    assert result.unavailable == dict.fromkeys(topics, "Kafka unavailable: no broker")
    assert not result.acknowledged and not result.failing


def test_a_timeout_while_kafka_is_reachable_is_narrowed_to_its_topic() -> None:
    topics = _topics(8)
    kafka = Kafka({"t0005"}, TIMEOUT)
    result = bisect_topics(topics, TIMEOUT.format("t0005"), kafka.send)
    assert result.failing == {"t0005": TIMEOUT.format("t0005")}
    assert not result.unavailable


def test_a_lost_topic_is_dropped_and_never_sent_again() -> None:
    topics = _topics(16)
    kafka = Kafka({"t0003"})
    lost: set[str] = set()

    def send(group: Sequence[str]) -> str | None:
        if len(kafka.sends) == 1:
            lost.add("t0003")  # the lock of the bad topic is lost during the second send
            kafka.sends.append(list(group))
            return "org.apache.spark.SparkException: Job 7 cancelled"
        return kafka.send(group)

    result = bisect_topics(topics, INVALID.format("t0003"), send, lost=lambda: lost)
    assert result.dropped == {"t0003"}
    assert not result.failing
    assert sorted(result.acknowledged) == [t for t in topics if t != "t0003"]
    assert all("t0003" not in g for g in kafka.sends[2:])


def test_a_topic_lost_before_the_search_is_not_sent_and_the_rest_go_once() -> None:
    topics = _topics(4)
    kafka = Kafka(set())
    result = bisect_topics(topics, "org.apache.spark.SparkException: Job 1 cancelled",
                           kafka.send, lost=lambda: {"t0002"})
    assert kafka.sends == [["t0000", "t0001", "t0003"]]
    assert result.dropped == {"t0002"} and not result.failing


def test_named_topics_reads_topic_partitions_from_producer_errors() -> None:
    topics = ["orders", "orders-eu", "a.b", "pay"]
    assert named_topics(INVALID.format("orders"), topics) == {"orders"}
    assert named_topics(TIMEOUT.format("orders-eu"), topics) == {"orders-eu"}
    assert named_topics("Expiring 2 record(s) for a.b-11:120000 ms has passed", topics) == {
        "a.b"}
    assert named_topics("RecordTooLargeException: The message is 2000 bytes", topics) == set()


class Flaky(Kafka):
    """A fake write whose topics in `failures` fail that many more times, then go through:
    a transient reason (a timeout) rather than a bad record."""

    def __init__(self, failures: dict[str, int], reason: str = TIMEOUT) -> None:
        super().__init__(set(), reason)
        self.failures = failures

    def send(self, topics: Sequence[str]) -> str | None:
        self.sends.append(list(topics))
        failing = sorted(t for t in topics if self.failures.get(t, 0) > 0)
        for t in failing:
            self.failures[t] -= 1
        return self.reason.format(failing[0]) if failing else None


def test_a_group_that_failed_for_a_moment_blames_no_topic_it_did_not_try_alone() -> None:
    """The combined write timed out on t0005; every re-send goes through. Each topic is
    sent again once, the right halves too, and nothing is blamed."""
    topics = _topics(8)
    kafka = Flaky({})
    result = bisect_topics(topics, TIMEOUT.format("t0005"), kafka.send)
    assert result.failing == {}, "blamed without a failed send of its own"
    assert sorted(result.acknowledged) == topics
    assert Counter(t for group in kafka.sends for t in group) == Counter(topics)
    assert len(kafka.sends) <= math.ceil(math.log2(8)) + 1, kafka.sends


def test_a_topic_is_blamed_with_the_reason_of_its_own_failed_send() -> None:
    """The group's reason names t0005 (whose failure passed); t0007 fails on its own, with
    a reason of its own: that is the one it is blamed with."""
    topics = _topics(8)
    kafka = Flaky({"t0007": 5}, INVALID)
    result = bisect_topics(topics, TIMEOUT.format("t0005"), kafka.send)
    assert result.failing == {"t0007": INVALID.format("t0007")}
    assert sorted(result.acknowledged) == [t for t in topics if t != "t0007"]
    assert ["t0007"] in kafka.sends, "t0007 was tried alone"
    assert len(kafka.sends) <= 2 * math.ceil(math.log2(8))
