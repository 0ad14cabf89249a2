"""The relay's session compacts a Delta table's small files as it appends (the ledger
gets one small file a copy), so the snapshot a long-running relay leaves stays small.

The files are counted from the Delta log by deltalake, an independent reader; the rows
by both readers.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.launch.spark import base_conf
from outbox_relay.ledger.delta import Ledger
from outbox_relay.ledger.pause import AUTO_COMPACT

pytestmark = pytest.mark.spark

THRESHOLD = "spark.databricks.delta.autoCompact.minNumFiles"
ROWS = 50  # an append of about 3 KB: an id and a UUID each


def test_appends_past_the_threshold_leave_a_compacted_snapshot_with_every_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    conf = base_conf(build_config({"spark": {"resolve_packages": False}}, env={}))
    assert spark.conf.get("spark.databricks.delta.autoCompact.enabled") == "true"
    threshold = int(conf[THRESHOLD])
    path = str(tmp_path / "ledger")
    appends = threshold + 2
    for i in range(appends):
        (spark.range(i * 100, i * 100 + 100).coalesce(1)
         .write.format("delta").mode("append").save(path))

    table = DeltaTable(path)
    active = len(table.file_uris())
    print(f"{appends} one-file appends, threshold {threshold}: {active} active files")
    assert active < threshold
    assert table.to_pyarrow_table().num_rows == appends * 100
    assert spark.read.format("delta").load(path).distinct().count() == appends * 100


def test_a_compacted_file_over_half_the_maximum_is_not_rewritten_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What the relay's maxFileSize relies on: auto compaction leaves alone a file of at
    least half its maximum, so each compaction rewrites only the copies since the last.
    Scaled down (the session's value is restored): ten appends of about 3 KB compact into
    one file over half of a 32 KB maximum, and the next ten do not rewrite it."""
    conf = base_conf(build_config({"spark": {"resolve_packages": False}}, env={}))
    key = "spark.databricks.delta.autoCompact.maxFileSize"
    assert conf[key] == str(16 * 1024 * 1024)
    before = spark.conf.get(key)
    threshold = int(conf[THRESHOLD])
    path = str(tmp_path / "ledger")
    spark.conf.set(key, str(32 * 1024))
    try:
        def append(i: int) -> None:
            (spark.range(i * ROWS, (i + 1) * ROWS).selectExpr("id", "uuid() AS pad").coalesce(1)
             .write.format("delta").mode("append").save(path))

        for i in range(threshold):
            append(i)
        compacted = _sizes(path)
        assert len(compacted) == 1 and min(compacted.values()) >= 16 * 1024, compacted
        for i in range(threshold, 2 * threshold):
            append(i)
        after = _sizes(path)
    finally:
        spark.conf.set(key, before or conf[key])
    print("after the first compaction:", compacted, "after the second:", sorted(after.values()))
    assert set(compacted) <= set(after)  # the first compacted file is still in the snapshot
    assert DeltaTable(path).to_pyarrow_table().num_rows == 2 * threshold * ROWS


def _sizes(path: str) -> dict[str, int]:
    """The snapshot's files and their sizes, from the Delta log (deltalake's reader)."""
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    return dict(zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist(), strict=True))


def test_a_stop_s_pause_of_compaction_is_the_session_s_again_once_the_copy_ended(
    spark: SparkSession,
) -> None:
    """A stop turns auto compaction off for the copy in flight. The setting belongs to the
    whole session, which outlives the relay where it is shared (a notebook, this test
    session, whose next Delta writes went uncompacted)."""
    ledger = Ledger(spark, build_config({"spark": {"resolve_packages": False}}, env={}),
                    cast(Database, None))
    before = spark.conf.get(AUTO_COMPACT)
    ledger.end_copies(cancel=False)
    assert spark.conf.get(AUTO_COMPACT) == "false"
    ledger.end_copies(cancel=False)  # a second call (the cancel) keeps the first value
    ledger.resume()
    assert spark.conf.get(AUTO_COMPACT) == before == "true"


def _ledger(spark: SparkSession) -> Ledger:
    return Ledger(spark, build_config({"spark": {"resolve_packages": False}}, env={}),
                  cast(Database, None))


def test_a_stop_gives_the_session_back_its_runtime_value_not_the_context_s(
    spark: SparkSession,
) -> None:
    """On Databricks a profile's Spark settings reach a running cluster's session as
    runtime settings only; the SparkContext's configuration never holds them. A session
    whose auto compaction is off must find it off after the relay's stop."""
    assert spark.sparkContext.getConf().get(AUTO_COMPACT) == "true"
    spark.conf.set(AUTO_COMPACT, "false")
    try:
        ledger = _ledger(spark)
        ledger.end_copies(cancel=False)
        ledger.resume()
        assert spark.conf.get(AUTO_COMPACT) == "false"
    finally:
        spark.conf.set(AUTO_COMPACT, "true")


@pytest.mark.parametrize("value", ["true", "false"])
def test_two_relays_of_one_session_that_stop_together_give_it_back_its_value(
    spark: SparkSession, value: str,
) -> None:
    """Each relay's pause is off until both copies ended, and neither hands the other
    the "false" of its own pause as the value to restore."""
    spark.conf.set(AUTO_COMPACT, value)
    try:
        first, second = _ledger(spark), _ledger(spark)
        first.end_copies(cancel=False)
        second.end_copies(cancel=False)
        first.resume()
        assert spark.conf.get(AUTO_COMPACT) == "false", "the second relay's copy is in flight"
        second.resume()
        assert spark.conf.get(AUTO_COMPACT) == value
        second.end_copies(cancel=False)  # a pause after both ended starts over
        assert spark.conf.get(AUTO_COMPACT) == "false"
        second.resume()
        assert spark.conf.get(AUTO_COMPACT) == value
    finally:
        spark.conf.set(AUTO_COMPACT, "true")


def test_a_session_without_a_value_of_its_own_is_left_without_one(spark: SparkSession) -> None:
    spark.conf.unset(AUTO_COMPACT)
    try:
        unset = spark.conf.get(AUTO_COMPACT, None)
        ledger = _ledger(spark)
        ledger.end_copies(cancel=False)
        assert spark.conf.get(AUTO_COMPACT) == "false"
        ledger.resume()
        assert spark.conf.get(AUTO_COMPACT, None) == unset
    finally:
        spark.conf.set(AUTO_COMPACT, "true")
