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

from relay.config.load import build_config
from relay.control.db import Database
from relay.launch.spark import base_conf
from relay.ledger.delta import AUTO_COMPACT, Ledger

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
