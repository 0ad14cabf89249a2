"""The delta-rs writer's table between copies, on a real database: it keeps the table it
opened and reads only the commits since (outbox_relay.ledger.delta_rs), checkpoints it
every ten commits as Delta's Spark writer does, and never carries a kept table over to a
ledger that was deleted, or written by another writer, meanwhile.

What Delta holds is read back from the table on disk, with Spark and with delta-rs.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from outbox_relay.ledger.delta import Ledger
from tests.integration.conftest import LedgerFactory
from tests.integration.test_ledger_writers import (
    _records,
    _rs_rows,
    _spark_rows,
    _stage,
    _staged_count,
)

pytestmark = pytest.mark.integration

ROWS = sum(len(r[3]) for r in _records())


def _copy(url: str, ledger: Ledger) -> None:
    """Stages the records of every shape and copies them: one batch, staging emptied."""
    _stage(url, _records())
    assert ledger.flush() == 1
    assert _staged_count(url) == 0


def test_a_ledger_copied_again_and_again_is_checkpointed_every_ten_commits(
    spark: SparkSession, migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
) -> None:
    path = tmp_path / "ledger"
    ledger = make_ledger("delta-rs", path)
    for _ in range(21):
        _copy(migrated_url, ledger)

    assert sorted(p.name for p in (path / "_delta_log").glob("*.checkpoint.parquet")) == [
        "00000000000000000010.checkpoint.parquet", "00000000000000000020.checkpoint.parquet"]
    assert DeltaTable(str(path)).version() == 20
    rows = _spark_rows(spark, path)  # Spark opens it from delta-rs's checkpoint
    assert Counter(r["copy_batch"] for r in rows) == {b: ROWS for b in range(1, 22)}


def test_a_ledger_deleted_between_copies_is_begun_again(
    migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
) -> None:
    """The kept table of a deleted ledger would commit its next version into an empty
    directory: a log without its first commits, which no reader opens."""
    path = tmp_path / "ledger"
    ledger = make_ledger("delta-rs", path)
    for _ in range(2):
        _copy(migrated_url, ledger)
    shutil.rmtree(path)

    _copy(migrated_url, ledger)

    table = DeltaTable(str(path))
    assert table.version() == 0
    assert Counter(r["copy_batch"] for r in table.to_pyarrow_table().to_pylist()) == {3: ROWS}


def test_a_kept_table_sees_the_other_writer_s_copies_made_since(
    spark: SparkSession, migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
) -> None:
    path = tmp_path / "ledger"
    kept, other = make_ledger("delta-rs", path), make_ledger("spark", path)
    for ledger in (kept, other, kept, other, kept):
        _copy(migrated_url, ledger)

    expected = {b: ROWS for b in range(1, 6)}
    assert Counter(r["copy_batch"] for r in _spark_rows(spark, path)) == expected
    assert Counter(r["copy_batch"] for r in _rs_rows(path)) == expected
