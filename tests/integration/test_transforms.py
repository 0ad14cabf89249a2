"""Per-topic transforms end to end: what a real consumer receives from a transformed
topic, and a transform that breaks its contract fails its batch without deleting it."""

from __future__ import annotations

import base64
import json
import random
import re

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outbox_relay.data.partitioning import partition_for
from outbox_relay.data.plan import RecordPlan
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_LEFT_OVER, EXIT_OK
from tests.integration import transforms_for_tests as tt
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    end_offsets,
    insert,
    order_report,
    partitioning_bytes,
    query,
    unique,
)

pytestmark = pytest.mark.integration

MODULE = "tests.integration.transforms_for_tests"
PARTITIONS = 5


def _shapes(topic: str, n: int, rng: random.Random) -> list[Msg]:
    """JSON values with a secret, over every key shape: key NULL, partition_key NULL /
    equal to the key / different, binary keys, keyless rows, a tombstone, a non-JSON value."""
    out = []
    for i in range(n):
        value = json.dumps({"n": i, tt.SECRET_FIELD: f"s{i}-{rng.randrange(10**6)}"}).encode()
        text = f"key-{rng.randrange(12)}"
        shape = i % 7
        if shape == 0:
            out.append(Msg(topic, text.encode(), value))
        elif shape == 1:
            out.append(Msg(topic, text.encode(), value, partition_key=text))
        elif shape == 2:
            out.append(Msg(topic, text.encode(), value, partition_key=f"pk-{rng.randrange(5)}"))
        elif shape == 3:
            out.append(Msg(topic, None, value, partition_key=f"pk-{rng.randrange(5)}"))
        elif shape == 4:
            out.append(Msg(topic, None, value, headers={"trace": f"t{i}"}))
        elif shape == 5:
            out.append(Msg(topic, bytes([0xFF, 0x00, rng.randrange(4)]), value))
        else:
            out.append(Msg(topic, text.encode(), None if i % 2 else b"not json"))
    return out


def _decrypt(spark: SparkSession, secrets: list[str]) -> list[str]:
    df = spark.createDataFrame([(s,) for s in secrets], "s string")
    plain = F.aes_decrypt(F.unbase64("s"), F.lit(tt.SECRET_KEY), F.lit("GCM")).cast("string")
    return [r[0] for r in df.select(plain).collect()]


@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
def test_an_encrypting_transform_keeps_keys_partitions_and_order(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession, partitioner: str,
) -> None:
    rng = random.Random(partitioner)
    secret, plain = unique("tx-secret"), unique("tx-plain")
    create_topics(stack.kafka_bootstrap, {secret: PARTITIONS, plain: 3})
    msgs = _shapes(secret, 300, rng) + _shapes(plain, 100, rng)
    rng.shuffle(msgs)
    ids = insert(migrated_url, [msgs[i:i + 10] for i in range(0, len(msgs), 10)])
    written = dict(zip(ids, msgs, strict=True))
    rules = [{"match": "tx-secret-.*", "transform": f"{MODULE}:encrypt_secret"}]
    config = make_config([secret, plain], relay={
        "partitioner": partitioner, "read_partitions": 3, "batch_size": 120,
        "topic_rules": rules})

    assert run_relay(config).exit_code == EXIT_OK

    got = consume(stack.kafka_bootstrap, [secret, plain], expect=len(ids))
    assert {r.outbox_id for r in got} == set(ids), "nothing lost"
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages") == [(0,)]
    inversions, spread, _ = order_report(written, got)
    assert (inversions, spread) == (0, 0), "per-key order, one partition per key"
    encrypted: dict[int, tuple[str, str]] = {}
    for r in got:
        m = written[r.outbox_id]
        assert r.headers["outbox-relay.source"] == b"test-relay"
        for name, value in (m.headers or {}).items():
            assert r.headers[name] == value.encode()
        if m.topic == plain:
            assert (r.key, r.value) == (m.key, m.value), "an untransformed topic is untouched"
            assert tt.MARK_HEADER not in r.headers
            continue
        assert r.headers[tt.MARK_HEADER] == tt.SECRET_FIELD.encode()
        assert r.key == (None if m.key is None else b"enc:" + m.key)
        pbytes = partitioning_bytes(m.partition_key, m.key)
        if pbytes is not None:  # the ORIGINAL bytes decide, not the rewritten key
            assert r.partition == partition_for(partitioner, pbytes, PARTITIONS)
        if m.value is None or not m.value.startswith(b"{"):
            assert r.value == m.value
            continue
        sent, received = json.loads(m.value), json.loads(r.value or b"")
        assert received["n"] == str(sent["n"])
        assert received[tt.SECRET_FIELD] != sent[tt.SECRET_FIELD]
        base64.b64decode(received[tt.SECRET_FIELD], validate=True)
        encrypted[r.outbox_id] = (received[tt.SECRET_FIELD], sent[tt.SECRET_FIELD])
    pairs = list(encrypted.values())
    assert len(pairs) > 200
    assert _decrypt(spark, [c for c, _ in pairs]) == [p for _, p in pairs]


def _marked_traffic(topic: str, marker: str, at: int, n: int = 8) -> list[Msg]:
    return [Msg(topic, f"k{i % 3}".encode(), marker.encode() if i == at else f"v{i}".encode())
            for i in range(n)]


BROKEN = [
    ("drop_marked", "drop-me", 3, "dropped, duplicated or reordered"),
    ("drop_marked", "drop-me", 7, "are missing: rows were dropped"),  # the last row
    ("duplicate_marked", "dup-me", 2, "dropped, duplicated or reordered"),
    ("reorder_marked", "swap-me", 1, "dropped, duplicated or reordered"),
    ("drop_everything", "-", 0, "came out of the transform, 8 were claimed"),
    ("lose_relay_column", "-", 0, "must return the columns it received"),
    ("not_a_dataframe", "-", 0, "returned str, not a DataFrame"),
]


@pytest.mark.parametrize(("fn", "marker", "at", "says"), BROKEN)
@pytest.mark.parametrize("policy", ["block", "park"])
def test_a_transform_that_breaks_its_contract_fails_the_batch_and_deletes_nothing(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    fn: str, marker: str, at: int, says: str, policy: str,
) -> None:
    """One read task, so the marked row's task is the whole batch: nothing of it may be
    sent, nothing deleted, nothing parked (a broken transform is not a poison message),
    and the topic's error names the transform. A long backoff keeps the drain from trying
    again (a retry sends the head alone, which may pass the transform)."""
    broken, fine = unique("tx-broken"), unique("tx-fine")
    create_topics(stack.kafka_bootstrap, {broken: 2, fine: 2})
    ids = insert(migrated_url, [_marked_traffic(broken, marker, at),
                                [Msg(fine, b"k", b"fine")]])
    spec = f"{MODULE}:{fn}"
    config = make_config([broken, fine], relay={
        "read_partitions": 1, "available_now_deadline_s": 0, "backoff_base_s": 60,
        "backoff_max_s": 60,
        "topic_rules": [{"match": "tx-broken-.*", "transform": spec, "policy": policy}]})

    result = run_relay(config)

    assert result.exit_code == EXIT_LEFT_OVER
    left = [i for (i,) in query(migrated_url, "SELECT id FROM kafka_messages ORDER BY id")]
    assert left == ids[:8], "the broken topic's batch is all still in the outbox"
    assert end_offsets(stack.kafka_bootstrap, broken, 2) == 0, "nothing of it was sent"
    assert query(migrated_url, "SELECT count(*) FROM relay_parked_messages") == [(0,)]
    error = query(migrated_url, "SELECT error, last_error FROM kafka_topic_info "
                  "WHERE topic = %s", (broken,))[0]
    assert error[0] is True
    assert f"transform {spec}" in error[1] and says in error[1], error[1]
    got = consume(stack.kafka_bootstrap, [fine], expect=1)
    # Maybe twice: the combined write may have sent it before the broken task failed.
    assert {r.outbox_id for r in got} == {ids[8]}, "the other topic flows"
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages WHERE topic = %s",
                 (fine,)) == [(0,)]


def _physical(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_topics_without_a_transform_keep_their_plan_and_are_read_once(
    make_config: ConfigFactory, spark: SparkSession,
) -> None:
    """Plans only (nothing runs): the cost of transforms where none applies is nil, and a
    mixed batch reads each row once, in one JDBC query per branch filtered by topic."""
    rules = [{"match": "tx-secret-.*", "transform": f"{MODULE}:encrypt_secret"}]
    topics = ["orders", "tx-secret-a", "tx-secret-b"]
    bare = RecordPlan(spark, make_config(), "token-a")
    ruled = RecordPlan(spark, make_config(relay={"topic_rules": rules}), "token-a")
    plain_only = ["orders"]

    def shape(df: DataFrame) -> str:
        return re.sub(r"#\d+L?|\[B@\w+", "", _physical(df))

    plain = ruled.records(plain_only)
    assert shape(plain) == shape(bare.records(plain_only)), "the plan of today, unchanged"
    assert plain is ruled.records(plain_only), "built once per session"
    assert plain is ruled.records(["orders", "refunds"]), "a new topic reuses the plan"
    for word in ("ArrowEvalPython", "DESC", "Union"):
        assert word not in _physical(plain)
    assert _physical(plain).count("Scan JDBC") == 1

    mixed = _physical(ruled.records(topics))
    assert mixed.count("Scan JDBC") == 2, "one query per branch, not one per topic"
    assert mixed.count("ArrowEvalPython") == 1
    assert "PushedFilters: [*Not(In(topic, [tx-secret-a,tx-secret-b]))]" in mixed
    assert "PushedFilters: [*In(topic, [tx-secret-a,tx-secret-b])]" in mixed
    only = _physical(ruled.records(["tx-secret-a"]))
    assert only.count("Scan JDBC") == 1 and "Union" not in only
