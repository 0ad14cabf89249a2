"""A ledger whose delta-rs copy cannot commit, as on a Databricks Volume, is copied by
Spark instead; a transient failure is retried with delta-rs.

On a Databricks driver `/Volumes/...` and `/dbfs/...` are FUSE mounts that refuse the
hard link delta-rs commits with: its writer raises the object store's error, "Function
not implemented (os error 38)" (delta-rs issue 2540), after it wrote the data files. The
test suite has no such mount, so delta-rs's writer is replaced at its call boundary by
one that fails that way and leaves what the real one left on such a mount (a data file,
an empty `_delta_log`); PostgreSQL, the Delta table and Spark's writer are real.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake.exceptions import CommitFailedError
from pyspark.sql import SparkSession

from outbox_relay.errors import RelayError
from tests.integration.conftest import LedgerFactory
from tests.integration.test_ledger_writers import (
    _engines,
    _records,
    _spark_rows,
    _stage,
    _staged_count,
)

pytestmark = pytest.mark.integration

# deltalake 1.6.6 raises the object store's error as a chain, one cause a line. On a
# loopback FUSE mount whose link(2) fails it raised exactly this with "Operation not
# permitted (os error 1)" (the kernel's answer there); Databricks' mount answers ENOSYS.
_ARROW = "\x1b[31m\u21b3\x1b[0m"
MOUNT_ERROR = (f"Generic LocalFileSystem error\n          {_ARROW} Unable to rename file\n"
               f"           {_ARROW} Function not implemented (os error 38)\n")
TIMEOUT = (f"Generic S3 error\n          {_ARROW} Error after 10 retries in 181.2s, "
           f"max_retries: 10, retry_timeout: 180s\n           {_ARROW} HTTP error\n"
           f"            {_ARROW} error sending request\n"
           f"             {_ARROW} operation timed out\n")


class _MountWriter:
    """delta-rs's write_deltalake as it fails on a FUSE mount without hard links."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls = 0

    def __call__(self, table_or_uri: Any, data: pa.Table, **_: Any) -> None:
        self.calls += 1
        # What the real writer left there: its data file and an empty log directory.
        (self.path / "_delta_log").mkdir(parents=True, exist_ok=True)
        pq.write_table(data, self.path / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet")
        raise OSError(MOUNT_ERROR)


class _FailsOnce:
    """The real writer, after one failure of the given kind."""

    def __init__(self, error: Exception) -> None:
        self.error: Exception | None = error
        self.real = deltalake.write_deltalake

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        self.real(*args, **kwargs)


def test_a_delta_rs_commit_refused_like_on_a_volume_falls_back_to_spark_once(
    spark: SparkSession, migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "ledger"
    mount = _MountWriter(path)
    monkeypatch.setattr(deltalake, "write_deltalake", mount)
    records = _records()
    _stage(migrated_url, records[:4])
    ledger = make_ledger("auto", path)
    assert not ledger.in_jvm, "auto picks delta-rs for a local path"
    caplog.set_level(logging.WARNING, logger="outbox_relay.ledger.delta")

    copied = ledger.flush()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    print(f"copied {copied}; staged {_staged_count(migrated_url)}; warnings {warnings}")
    assert copied == 1
    assert _staged_count(migrated_url) == 0
    assert ledger.in_jvm
    (said,) = [w for w in warnings if "Spark" in w]
    assert str(path) in said and "Function not implemented" in said

    _stage(migrated_url, records[4:])  # the next copy goes to Spark without a try
    assert ledger.flush() == 1
    assert mount.calls == 1
    assert _staged_count(migrated_url) == 0
    assert _engines(path) == ["spark", "spark"]
    rows = _spark_rows(spark, path)
    assert sorted(r["message_id"] for r in rows) == sorted(i for r in records for i in r[3])


@pytest.mark.parametrize("error", [
    OSError(TIMEOUT),
    CommitFailedError("Tried committing existing table version: 1"),  # delta-rs's words
], ids=["object-store-timeout", "concurrent-commit"])
def test_a_transient_delta_rs_failure_is_retried_with_delta_rs(
    migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, error: Exception,
) -> None:
    path = tmp_path / "ledger"
    monkeypatch.setattr(deltalake, "write_deltalake", _FailsOnce(error))
    _stage(migrated_url, _records())
    staged = _staged_count(migrated_url)
    ledger = make_ledger("auto", path)

    with pytest.raises(RelayError) as failed:
        ledger.flush()
    print(f"{type(failed.value).__name__}: {failed.value}")
    assert not ledger.in_jvm
    assert _staged_count(migrated_url) == staged

    assert ledger.flush() == 1
    assert _engines(path) == ["delta-rs"]
    assert _staged_count(migrated_url) == 0


def test_an_explicit_delta_rs_writer_does_not_fall_back(
    migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "ledger"
    monkeypatch.setattr(deltalake, "write_deltalake", _MountWriter(path))
    _stage(migrated_url, _records())
    staged = _staged_count(migrated_url)
    ledger = make_ledger("delta-rs", path)

    with pytest.raises(RelayError, match="Function not implemented"):
        ledger.flush()
    assert not ledger.in_jvm
    assert _staged_count(migrated_url) == staged
