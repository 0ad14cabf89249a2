"""Where Spark reads `spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart`, which the
relay turns off (outbox_relay.launch.spark.base_conf): whether it could be scoped to the relay's
own query.

Spark 4.2 reads it in the query's own thread, when the query first looks for its offsets
(MicroBatchExecution.populateStartOffsets, from the session that started the query), after
`DataStreamWriter.start()` has returned. So turning it off around `start()` and back on
after would not scope it: the query reads it later, and whatever the session holds then.
It is the session's, and so it reaches every query that session starts
(docs/databricks.md says so).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

VERIFY = "spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart"


def _cut_short(checkpoint: Path) -> None:
    """The temporary file a kill leaves while Spark writes a new query's first offsets."""
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True)
    (offsets / f".0.{uuid.uuid4()}.tmp").write_text('v1\n{"batchWatermarkMs":0,"ba')


def _start(spark: SparkSession, checkpoint: Path) -> object:
    def nothing(df: DataFrame, batch_id: int) -> None:
        pass

    return (spark.readStream.format("rate").option("rowsPerSecond", 1).load()
            .writeStream.foreachBatch(nothing)
            .option("checkpointLocation", str(checkpoint)).start())


def test_the_check_runs_in_the_query_after_start_returned(
    spark: SparkSession, tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "checkpoint"
    _cut_short(checkpoint)
    before = spark.conf.get(VERIFY)
    spark.conf.set(VERIFY, "true")
    try:
        query = _start(spark, checkpoint)  # returns: the check has not run yet
        with pytest.raises(StreamingQueryException) as failed:
            query.awaitTermination(120)  # type: ignore[attr-defined]
    finally:
        spark.conf.set(VERIFY, before)
    print(str(failed.value).splitlines()[0][:200])
    assert "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY" in str(failed.value)


def test_the_relay_s_setting_reaches_another_query_of_its_session(
    spark: SparkSession, tmp_path: Path,
) -> None:
    """The test session is built as the relay builds its own (outbox_relay.launch.spark)."""
    assert spark.conf.get(VERIFY) == "false"
    checkpoint = tmp_path / "checkpoint"
    _cut_short(checkpoint)
    query = _start(spark, checkpoint)
    try:
        query.processAllAvailable()  # type: ignore[attr-defined]
        assert query.exception() is None  # type: ignore[attr-defined]
    finally:
        query.stop()  # type: ignore[attr-defined]
