"""Compaction keeps a key's last deliverable value (issue 47, item 5), on the two-broker
cluster of the order tests, read back by an independent consumer.

A claim on a topic the relay compacts withholds K:v1 while it sends K:v2, the newer
value of the same record key and partitioning bytes. Here K:v2 is over the topic's real
max.message.bytes, which the relay has not read yet (the failpoint
`stale_max_message_bytes` plays a limit lowered after the relay read the topic's
config), so the broker refuses K:v2 for good. K:v2 never reached Kafka, so K:v1 must:
once K:v2 is skipped by an operator (block) or parked (park), a consumer of K reads K:v1
last. Around it, adversarial neighbours, each a way to get the rule wrong:

- topic "alone": K's successor is the only later row of K's partitioning bytes. Z has
  K's record key under other partitioning bytes, and its successor was delivered: Z:v1
  must never be sent. B is a binary key that is not UTF-8, Y a NULL key with a
  partition_key (never compacted).
- topic "shared": W, another record key with K's partitioning bytes (its partition_key
  is K's text), lies between K:v1 and K:v2 and is delivered. K:v1 can then no longer be
  sent in order (W is later and in Kafka), whatever became of K:v2: it stays unsent. A
  row with neither key nor partition_key follows.

Only in "alone" must K:v2's refusal be seen as one: there, no other row shares K:v2's
partition. The Java producer splits a produce batch the broker refuses as too large and
retries the halves, but one that still holds the large record is refused again, until
the delivery timeout expires: a refusal then looks like a timeout, which says nothing
about what was appended, and K:v1 rightly stays unsent. The producer places a keyless
record itself, so "alone" has none.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from outbox_relay.cli import main
from outbox_relay.config import Config
from outbox_relay.control.db import Database
from outbox_relay.exit_codes import ExitCode
from outbox_relay.ledger.delta import Ledger
from outbox_relay.rules.partitioners import partition_for
from outbox_relay.stream.runner import EXIT_LEFT_OVER, EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    Received,
    consume,
    insert,
    order_report,
    partitioning_bytes,
    query,
    unique,
)
from tests.integration.process import write_profile
from tests.integration.two_brokers import (  # noqa: F401  (fixtures)
    TwoBrokers,
    cluster_fixture,
    two_brokers_fixture,
)
from tests.lanes import LANES, on_lane

pytestmark = pytest.mark.integration

LEADERS = [1, 2, 1, 2]
LIMIT = 20_000  # the topics' real max.message.bytes
K = b"K"
BINARY = b"\xff\xfe\x01"
BIG = random.Random(47).randbytes(2 * LIMIT)  # incompressible: over the limit under lz4 too


def _alone(topic: str) -> list[tuple[Msg, str]]:
    """The rows of topic "alone", in id order, with the outcome each must end with
    (`refused` stands for the policy's: skipped under block, parked under park)."""
    return [
        (Msg(topic, K, b"K:v1"), "published"),
        (Msg(topic, BINARY, b"B:v1"), "compacted"),
        (Msg(topic, K, b"Z:v1", partition_key="Z"), "compacted"),
        (Msg(topic, None, b"Y:v1", partition_key="Y"), "published"),
        (Msg(topic, K, b"Z:v2", partition_key="Z"), "published"),
        (Msg(topic, K, BIG, partition_key=K.decode()), "refused"),
        (Msg(topic, BINARY, b"B:v2"), "published"),
        (Msg(topic, None, b"Y:v2", partition_key="Y"), "published"),
    ]


def _shared(topic: str) -> list[tuple[Msg, str]]:
    return [
        (Msg(topic, K, b"K:v1"), "compacted"),
        (Msg(topic, b"W", b"W:v1", partition_key=K.decode()), "published"),
        (Msg(topic, K, BIG, partition_key=K.decode()), "refused"),
        (Msg(topic, None, b"keyless"), "published"),
    ]


def _k_values(got: list[Received], written: dict[int, Msg], topic: str) -> list[bytes | None]:
    """The values of K (record key K, partitioning bytes K) that `topic` holds, in the
    order of their partition, as written: the rows come from the test's own record."""
    keyed = [r for r in got if r.topic == topic and written[r.outbox_id].key == K
             and partitioning_bytes(written[r.outbox_id].partition_key, K) == K]
    return [r.value for r in sorted(keyed, key=lambda r: (r.partition, r.offset))]


def _ledger(spark: SparkSession, config: Config) -> list[tuple[int, str]]:
    ledger = Ledger(spark, config, Database(config.postgres))
    ledger.flush()
    return [(r.message_id, r.outcome) for r in ledger.table().collect()]


@pytest.mark.parametrize("lane", LANES)
@pytest.mark.parametrize("policy", ["block", "park"])
def test_a_withheld_value_reaches_kafka_when_its_successor_is_refused_for_good(
    cluster: TwoBrokers, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, policy: str,
    lane: str,
) -> None:
    alone, shared = unique(f"alone-{policy}-{lane}"), unique(f"shared-{policy}-{lane}")
    for topic in (alone, shared):
        cluster.create_topic(topic, LEADERS, **{"max.message.bytes": str(LIMIT)})
    rows = _alone(alone) + _shared(shared)
    # The premise of "alone" (murmur2, the relay's default): K:v2 has its partition alone.
    assert [m.value for m, _ in rows if m.topic == alone and partition_for(
        "murmur2", partitioning_bytes(m.partition_key, m.key), len(LEADERS))
        == partition_for("murmur2", K, len(LEADERS))] == [b"K:v1", BIG]
    ids = insert(migrated_url, [[m] for m, _ in rows])
    written = {i: m for i, (m, _) in zip(ids, rows, strict=True)}
    refused = "skipped" if policy == "block" else "parked"
    expected = {i: refused if o == "refused" else o
                for i, (_, o) in zip(ids, rows, strict=True)}
    config = on_lane(make_config(
        [alone, shared],
        kafka={"bootstrap_servers": cluster.bootstrap, "delivery_timeout_ms": 4000,
               "request_timeout_ms": 2000},
        relay={"read_partitions": 2, "available_now_deadline_s": 15,
               "topic_rules": [{"match": ".*", "compact": True, "policy": policy}]}), lane)
    monkeypatch.setenv("RELAY_FAILPOINTS", "stale_max_message_bytes")

    if policy == "block":
        # One round: the broker refuses both K:v2 and the topics wait, in error.
        first = run_relay(_again(config, "1", deadline_s=0))
        monkeypatch.delenv("RELAY_FAILPOINTS")  # the relay reads the real limit now
        second = run_relay(_again(config, "2", deadline_s=5))
        errors = dict(query(migrated_url, "SELECT topic, last_error FROM kafka_topic_info"))
        print(f"block: exits {first.exit_code}, {second.exit_code}; errors {errors}")
        assert second.exit_code == EXIT_LEFT_OVER
        assert all("over the limit" in (e or "") for e in errors.values()), errors
        culprits = [i for i, o in expected.items() if o == "skipped"]
        profile = str(write_profile(config, tmp_path / "relay.toml"))
        assert main(["--config", profile, "skip", *map(str, culprits), "--yes"]) == ExitCode.OK
        assert run_relay(_again(config, "3")).exit_code == EXIT_OK
    else:
        assert run_relay(config).exit_code == EXIT_OK

    got = consume(cluster.bootstrap, [alone, shared], expect=1)
    for topic in (alone, shared):
        print(f"{topic}: consumer saw", [(r.partition, r.outbox_id, (r.value or b"")[:8])
                                         for r in sorted(got, key=lambda r: (r.partition,
                                                                              r.offset))
                                         if r.topic == topic])
    inversions, spread, _ = order_report(written, got)
    assert inversions == 0 and spread == 0, "first appearances in id order per key"
    assert _k_values(got, written, alone)[-1:] == [b"K:v1"], "K's last value in Kafka is K:v1"
    assert _k_values(got, written, shared) == [], "K:v1 is never sent after W, nor K:v2 at all"
    records = _ledger(spark, config)
    print("ledger:", sorted(records))
    outcomes = dict(records)
    assert len(outcomes) == len(records), "one ledger record per id"
    assert outcomes == expected, "every id accounted for once, with its outcome"
    sent = {r.outbox_id for r in got}
    assert sent == {i for i, o in expected.items() if o == "published"}, "published: in Kafka"
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0


def _again(config: Config, run: str, deadline_s: float | None = None) -> Config:
    """`config` for one more run in the same test, with a checkpoint of its own (and a
    deadline of its own for the topics in backoff)."""
    update: dict[str, object] = {"checkpoint_path": f"{config.relay.checkpoint_path}-{run}"}
    if deadline_s is not None:
        update["available_now_deadline_s"] = deadline_s
    return config.model_copy(update={"relay": config.relay.model_copy(update=update)})
