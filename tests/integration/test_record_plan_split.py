"""The read's split by batch size (outbox_relay.data.plan: one task for a batch of at most
ONE_TASK_ROWS rows, `relay.read_partitions` above) and the whole plan planned once
(RecordPlan.executable), on the real stack.

Whichever split a batch gets, every key shape (NULL key, partition_key equal to the key's
text or not, binary keys, tombstones) must arrive, in per-key order, as an independent
consumer reads it back. A batch above ONE_TASK_ROWS would be slow here, so the threshold
is lowered instead: ~50 rows then take the split path.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import outbox_relay.data.plan
import outbox_relay.data.read
from outbox_relay.config import Config, PostgresConfig
from outbox_relay.data.plan import ONE_TASK_ROWS, RecordPlan
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    every_key_shape,
    insert,
    order_report,
    query,
    unique,
)

pytestmark = pytest.mark.integration

READ_PARTITIONS = 2
SESSION = ("INSERT INTO relay_sessions (session_id, batch_id, topic, lock_token, ids)"
           " VALUES (gen_random_uuid(), %s, %s, %s, %s)")


@pytest.mark.parametrize("read_partitions", [1, 2, 8])
def test_a_batch_of_at_most_one_task_s_rows_is_read_by_one_task_and_a_bigger_one_is_split(
    spark: SparkSession, make_config: ConfigFactory, read_partitions: int,
) -> None:
    config: Config = make_config(relay={"read_partitions": read_partitions})
    plan = RecordPlan(spark, config, "split-token")
    assert plan.partitions_for(0) == 1, "a warm-up's batch of no rows"
    assert plan.partitions_for(1) == 1
    assert plan.partitions_for(ONE_TASK_ROWS) == 1
    assert plan.partitions_for(ONE_TASK_ROWS + 1) == read_partitions
    assert plan.partitions_for(50 * ONE_TASK_ROWS) == read_partitions
    # Rows not known: the profile's own split, never one task by default.
    assert plan.partitions_for(None) == read_partitions


@pytest.fixture
def read_splits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The task count of every read the record plan builds."""
    seen: list[int] = []
    read = outbox_relay.data.read.read_current_batch

    def spy(spark: SparkSession, pg: PostgresConfig, token: str, partitions: int) -> DataFrame:
        seen.append(partitions)
        return read(spark, pg, token, partitions)

    monkeypatch.setattr(outbox_relay.data.plan, "read_current_batch", spy)
    return seen


@pytest.mark.parametrize("split", [False, True], ids=["one-task", "split"])
def test_every_key_shape_arrives_in_key_order_whether_the_read_is_split_or_not(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    monkeypatch: pytest.MonkeyPatch, read_splits: list[int], split: bool,
) -> None:
    if split:
        monkeypatch.setattr(outbox_relay.data.plan, "ONE_TASK_ROWS", 5)
    topics = {unique("split-a"): 3, unique("split-b"): 5}
    create_topics(stack.kafka_bootstrap, topics)
    msgs = every_key_shape(list(topics), 26)
    ids = insert(migrated_url, [msgs])
    written = dict(zip(ids, msgs, strict=True))
    config = make_config(list(topics), name=f"split-{split}", relay={
        "read_partitions": READ_PARTITIONS, "batch_size": 1_000,
        "direct_lane": False})  # the record plan's read is the Spark lane's

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    print(f"split={split}: reads built with tasks {read_splits}")
    # The relay's whole batch went through the expected read (the drained claim).
    assert read_splits, "the record plan read the batch"
    assert set(read_splits) == ({READ_PARTITIONS} if split else {1})
    got = consume(stack.kafka_bootstrap, list(topics), expect=len(ids))
    inversions, spread, keyless = order_report(written, got)
    assert sorted(r.outbox_id for r in got) == sorted(ids), "lost or duplicated"
    assert spread == 0, "every partitioning key sits in one Kafka partition"
    assert inversions == 0, "first appearances in id order per partitioning key"
    assert keyless == sum(1 for m in msgs if m.key is None and m.partition_key is None) > 0
    by_id = {r.outbox_id: r for r in got}
    # Binary keys and tombstones arrive byte for byte.
    for i, m in written.items():
        assert (by_id[i].key, by_id[i].value) == (m.key, m.value)
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages") == [(0,)]


def _claim(url: str, token: str, batch: int, msgs: list[Msg]) -> list[int]:
    """Rows claimed under `token` in batch `batch`, as the relay's claim leaves them."""
    ids = insert(url, [msgs])
    for topic in sorted({m.topic for m in msgs}):
        query(url, SESSION, (batch, topic, token,
                             [i for i, m in zip(ids, msgs, strict=True) if m.topic == topic]))
    return ids


def _sorted_rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def _ids_of(df: DataFrame) -> set[int]:
    out: set[int] = set()
    for r in df.collect():
        headers = dict(r["headers"])
        out.add(int(headers["outbox-relay.id"]))
    return out


@pytest.mark.parametrize("one_task_rows", [ONE_TASK_ROWS, 5], ids=["one-task", "split"])
def test_the_planned_once_plan_reads_what_the_plan_reads_and_each_current_batch_afresh(
    spark: SparkSession, migrated_url: str, make_config: ConfigFactory,
    monkeypatch: pytest.MonkeyPatch, one_task_rows: int,
) -> None:
    monkeypatch.setattr(outbox_relay.data.plan, "ONE_TASK_ROWS", one_task_rows)
    topic = unique("planned")
    config: Config = make_config([topic], relay={"read_partitions": READ_PARTITIONS})
    token = f"planned token\t{topic}\\"  # white space and a backslash travel in a setting
    plan = RecordPlan(spark, config, token)
    first = every_key_shape([topic], 24)
    first_ids = _claim(migrated_url, token, 1, first)

    records = plan.records([topic], rows=len(first))
    executable = plan.executable(records)

    assert executable is not records, "a whole plan without a transform is planned once"
    assert executable.rdd.getNumPartitions() == plan.partitions_for(len(first))
    assert executable.columns == records.columns
    assert _sorted_rows(executable) == _sorted_rows(records)
    assert _ids_of(executable) == set(first_ids)

    # The same planned RDD runs its JDBC read again: a later batch of the token, not the
    # rows it was planned over.
    second = every_key_shape([topic], 18)
    second_ids = _claim(migrated_url, token, 2, second)
    again = plan.executable(plan.records([topic], rows=len(first)))
    assert _ids_of(again) == set(second_ids)
    assert _sorted_rows(again) == _sorted_rows(plan.records([topic], rows=len(first)))


def test_plans_of_part_of_a_batch_are_written_as_they_are(
    spark: SparkSession, migrated_url: str, make_config: ConfigFactory,
) -> None:
    """Bisection's and isolation's plans serve one write each: nothing to plan ahead."""
    topic = unique("part")
    config: Config = make_config([topic])
    plan = RecordPlan(spark, config, f"part-{topic}")
    ids = _claim(migrated_url, f"part-{topic}", 1, every_key_shape([topic], 12))
    part = plan.records([topic], (ids[2], ids[5]), whole=False, rows=4)
    assert plan.executable(part) is part
    assert _ids_of(part) == set(ids[2:6])
