"""Both lanes of the data plane write the same records, byte for byte, as a consumer reads
them back: one claimed batch of every key shape (key NULL, binary non-UTF-8, partition_key
NULL, equal to the key, different from it), user headers and trace context, tombstones, a
CloudEvents topic with a default type and one without, sent once through Spark's sink on
the executors (the Spark lane's own read and record plan) and once through the driver's
producer (the direct lane's own read and records), each into a topic of its own with the
same partition count. Key, value, every header in order and the partition must agree.
"""

from __future__ import annotations

import re

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from outbox_relay.control.db import Database
from outbox_relay.data.plan import RecordPlan
from outbox_relay.data.sink import write_records
from outbox_relay.direct.producer import producer_config
from outbox_relay.direct.read import read_batch
from outbox_relay.direct.records import BULK_MIN_ROWS, to_records
from outbox_relay.direct.send import Sender
from outbox_relay.rules.cloudevent_topics import default_types
from outbox_relay.stack import StackInfo
from tests.integration.claiming import TOKEN, claim_all
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import Msg, consume, create_topics, every_key_shape, insert, unique

pytestmark = pytest.mark.integration

PARTITIONS = 5


def _rows(topics: list[str], typed: str) -> list[Msg]:
    """Every key shape; user headers with trace context, a row's own ce_type, or none
    (`typed`, the CloudEvents topic without a default type, needs a type on every row);
    and enough rows of distinct keys, as key or as partition_key, that the direct lane
    hashes them with numpy (BULK_MIN_ROWS)."""
    rows = every_key_shape(topics, 24)
    rows += [Msg(topics[i % len(topics)], f"order-{i}".encode() if i % 2 else b"k",
                 f"bulk-{i}".encode(), None if i % 2 else f"pk-ü-{i}")
             for i in range(2 * BULK_MIN_ROWS)]
    traced = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
              "app": "shop ✓"}
    out = []
    for n, m in enumerate(rows):
        headers: dict[str, str] | None = (
            dict(traced) if n % 3 == 0 else ({"ce_type": "own.type"} if n % 3 == 1 else None))
        if m.topic == typed:
            headers = {**(headers or {}), "ce_type": "own.type"}
        out.append(Msg(m.topic, m.key, m.value, m.partition_key, headers))
    return out


def test_both_lanes_send_identical_records(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, spark: SparkSession,
) -> None:
    plain, ce_default, ce_own = unique("plain"), unique("ce-default"), unique("ce-own")
    topics = [plain, ce_default, ce_own]
    config = make_config(topics, relay={"topic_rules": [
        {"match": re.escape(ce_default), "cloudevents": True, "event_type": "order.placed"},
        {"match": re.escape(ce_own), "cloudevents": True}]})
    insert(migrated_url, [[m] for m in _rows(topics, ce_own)])
    batch_id = claim_all(config, topics, dict.fromkeys(topics, PARTITIONS))
    via_spark = {t: unique("via-spark") for t in topics}
    via_driver = {t: unique("via-driver") for t in topics}
    create_topics(stack.kafka_bootstrap, dict.fromkeys([*via_spark.values(),
                                                        *via_driver.values()], PARTITIONS))
    plan = RecordPlan(spark, config, TOKEN)
    records = plan.records(topics)
    renamed = records.withColumn("topic", F.coalesce(*[
        F.when(F.col("topic") == t, F.lit(to)) for t, to in via_spark.items()]))
    write_records(renamed, config.kafka)
    db = Database(config.postgres)
    try:
        direct = to_records(read_batch(db, batch_id, topics),
                            source_name=config.relay.source_name,
                            header_prefix=config.relay.header_prefix,
                            partitioner=config.relay.partitioner,
                            cloudevents=default_types(config.relay.topic_rules, topics))
    finally:
        db.close()
    direct = [r._replace(topic=via_driver[r.topic]) for r in direct]
    sender = Sender(producer_config(config.kafka, config.relay.partitioner))
    sent = sender.send(direct, 30)
    sender.close()
    assert sent.acknowledged == {r.id for r in direct}, sent
    n = len(direct)
    got_spark = consume(stack.kafka_bootstrap, list(via_spark.values()), expect=n)
    got_driver = consume(stack.kafka_bootstrap, list(via_driver.values()), expect=n)
    back = {v: k for k, v in via_spark.items()} | {v: k for k, v in via_driver.items()}

    def seen(got: list) -> dict[int, tuple]:  # type: ignore[type-arg]
        return {r.outbox_id: (back[r.topic], r.partition, r.key, r.value, r.header_list)
                for r in got}

    spark_side, driver_side = seen(got_spark), seen(got_driver)
    assert len(got_spark) == len(got_driver) == n
    assert spark_side == driver_side
    tombstones = [i for i, rec in driver_side.items() if rec[3] is None]
    keyless = [i for i, rec in driver_side.items() if rec[2] is None]
    assert tombstones and keyless, "the batch holds tombstones and keyless records"
    print(f"{n} records, identical on both lanes ({len(tombstones)} tombstones, "
          f"{len(keyless)} keyless)")
