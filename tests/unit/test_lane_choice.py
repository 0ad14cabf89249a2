"""Which lane sends a topic's claim, and how the driver's producer packs claims into
writes (outbox_relay.stream.delivery, outbox_relay.stream.direct_lane). No Spark, no
network: the lanes' own sends are the integration tests' (tests/integration/
test_lane_contract.py and the order and fault tests on both lanes)."""

from __future__ import annotations

from typing import cast

import pytest

from outbox_relay.control.claims import Claim
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.stream.delivery import Delivery
from outbox_relay.stream.direct_lane import DirectLane, DirectSettings
from outbox_relay.stream.spark_lane import SparkLane

SETTINGS = DirectSettings("src", "relay-", "murmur2", 30.0, max_rows=5_000,
                          max_bytes=8 * 1024 * 1024)


def _claim(topic: str, rows: int, size: int | None = None) -> Claim:
    return Claim(topic, f"s-{topic}", rows, 0, None, None, bytes=rows * 1024 if size is None
                 else size)


class _Direct:
    settings = SETTINGS


def _delivery(*, direct: bool = True, spark: bool = True,
              transformed: frozenset[str] = frozenset()) -> Delivery:
    delivery = Delivery(cast("RuntimeMetrics", None),
                        direct=cast("DirectLane", _Direct()) if direct else None,
                        transformed=lambda topic: topic in transformed)
    if spark:
        delivery.attach_spark(cast("SparkLane", object()))
    return delivery


def test_many_small_topics_share_writes_of_the_lanes_size() -> None:
    """W3's shape: 1,000 topics of 100 rows each went out in 1,000 requests of one write
    per round, a few rows a topic; packed whole, they take 20 writes."""
    claims = [_claim(f"t{i:04d}", 100) for i in range(1_000)]
    writes = SETTINGS.writes(claims)
    assert len(writes) == 20
    assert [c for w in writes for c in w] == claims, "every claim once, in order"
    assert all(sum(c.rows for c in w) <= 5_000 for w in writes)


def test_a_write_ends_at_the_byte_limit_and_an_oversized_claim_goes_alone() -> None:
    big = _claim("big", 1, size=9 * 1024 * 1024)
    claims = [_claim("a", 10, size=5 * 1024 * 1024), _claim("b", 10, size=4 * 1024 * 1024),
              big, _claim("c", 1, size=1)]
    assert [[c.topic for c in w] for w in SETTINGS.writes(claims)] == [
        ["a"], ["b"], ["big"], ["c"]]
    assert SETTINGS.writes([]) == []


def test_with_spark_up_a_large_claim_or_a_transformed_topic_is_sparks() -> None:
    delivery = _delivery(transformed=frozenset({"tx"}))
    small, large, wide = _claim("small", 100), _claim("large", 5_001), _claim(
        "wide", 10, size=8 * 1024 * 1024 + 1)
    direct, spark = delivery.lanes([small, large, _claim("tx", 1), wide])
    assert [c.topic for c in direct] == ["small"]
    assert [c.topic for c in spark] == ["large", "tx", "wide"]


def test_before_spark_every_claim_it_may_send_is_the_drivers() -> None:
    delivery = _delivery(spark=False)
    claims = [_claim("a", 100), _claim("b", 5_000)]
    assert delivery.lanes(claims) == (claims, [])
    # What it claims, it can send: each topic's claim is capped at a write's size.
    assert delivery.claim_limits(20_000, 64 * 1024 * 1024) == (5_000, 8 * 1024 * 1024)
    assert delivery.claim_limits(100, 1024) == (100, 1024)


@pytest.mark.parametrize("spark", [True, False])
def test_without_the_direct_lane_every_claim_is_sparks(spark: bool) -> None:
    delivery = _delivery(direct=False, spark=spark)
    claims = [_claim("a", 1)]
    assert delivery.lanes(claims) == ([], claims)
    assert delivery.claim_limits(20_000, 1024) == (20_000, 1024)


def test_once_spark_is_up_claims_take_the_profiles_limits() -> None:
    assert _delivery().claim_limits(20_000, 64 * 1024 * 1024) == (20_000, 64 * 1024 * 1024)


BACKLOGS = DirectSettings("src", "relay-", "murmur2", 30.0, max_rows=5_000,
                          max_bytes=8 * 1024 * 1024, backlogs=True)


class _DirectBacklogs:
    settings = BACKLOGS


@pytest.mark.parametrize("spark", [True, False])
def test_backlogs_on_the_driver_cap_every_claim_at_a_write_spark_up_or_not(spark: bool) -> None:
    """relay.backlog_lane "direct": a backlog is claimed in the direct lane's limits and
    sent by it, so no claim ever needs Spark for its size, and meeting one does not ask
    for the session."""
    delivery = Delivery(cast("RuntimeMetrics", None),
                        direct=cast("DirectLane", _DirectBacklogs()),
                        transformed=lambda topic: topic == "tx")
    if spark:
        delivery.attach_spark(cast("SparkLane", object()))
    assert not delivery.backlogs_to_spark
    assert delivery.claim_limits(20_000, 64 * 1024 * 1024) == (5_000, 8 * 1024 * 1024)
    full = _claim("full", 5_000)
    direct, rest = delivery.lanes([full, _claim("tx", 1)])
    assert [c.topic for c in direct] == ["full"]
    # A transformed topic's records are made on the executors, whatever its size.
    assert [c.topic for c in rest] == ["tx"]


def test_backlogs_go_to_spark_by_default_or_without_the_direct_lane() -> None:
    assert _delivery().backlogs_to_spark
    assert _delivery(direct=False).backlogs_to_spark
