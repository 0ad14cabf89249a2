"""The relay's session compacts a Delta table's small files as it appends (the ledger
gets one small file a copy), so the snapshot a long-running relay leaves stays small.

The files are counted from the Delta log by deltalake, an independent reader; the rows
by both readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from relay.config_load import build_config
from relay.spark import base_conf

pytestmark = pytest.mark.spark

THRESHOLD = "spark.databricks.delta.autoCompact.minNumFiles"


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
