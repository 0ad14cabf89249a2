"""Who copies the ledger under `ledger.writer = "auto"`: delta-rs for a path on this
machine's own disk, Delta's Spark writer for object storage and for Databricks' mounts;
and which delta-rs failures are transient (retried with delta-rs) rather than lasting
(under `auto`, handed to Spark).

A Databricks Volume (`/Volumes/...`) or DBFS mount (`/dbfs/...`) looks like a local path,
but it is a FUSE mount on the driver where delta-rs's commit fails ("Function not
implemented", delta-rs issue 2540): auto must not pick delta-rs there.
"""

from __future__ import annotations

from typing import cast

import pytest
from pyspark.sql import SparkSession

from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.ledger.delta import Ledger
from outbox_relay.ledger.delta_rs import described, transient


def _in_jvm(path: str, writer: str = "auto") -> bool:
    config = build_config({"ledger": {"path": path, "writer": writer}}, env={})
    # Choosing the writer touches neither Spark nor the database.
    return Ledger(cast(SparkSession, None), config, cast(Database, None)).in_jvm


@pytest.mark.parametrize("path", [
    "/Volumes/main/outbox_relay/state/ledger",
    "/Volumes",
    "/dbfs/mnt/state/ledger",
    "/dbfs",
    "dbfs:/mnt/state/ledger",
    "file:///Volumes/main/outbox_relay/state/ledger",
    "file:/dbfs/mnt/state/ledger",
])
def test_auto_copies_a_ledger_on_a_databricks_mount_with_spark(path: str) -> None:
    assert _in_jvm(path), f"auto picked delta-rs for {path}"


@pytest.mark.parametrize("path", ["s3://bucket/ledger", "abfss://c@a.dfs.core.windows.net/l"])
def test_auto_copies_a_ledger_on_object_storage_with_spark(path: str) -> None:
    assert _in_jvm(path)


@pytest.mark.parametrize("path", [
    ".relay-data/ledger", "/var/lib/outbox-relay/ledger", "/tmp/Volumes/ledger",
    "/srv/dbfs-archive/ledger", "file:///var/lib/outbox-relay/ledger",
])
def test_auto_copies_a_ledger_on_a_local_disk_with_delta_rs(path: str) -> None:
    assert not _in_jvm(path), f"auto picked Spark for {path}"


def test_an_explicit_writer_is_taken_as_it_is_even_on_a_mount() -> None:
    assert not _in_jvm("/Volumes/main/s/v/ledger", writer="delta-rs")
    assert _in_jvm("/tmp/ledger", writer="spark")


_ARROW = "\x1b[31m\u21b3\x1b[0m"


def _chain(*causes: str) -> str:
    """An object store's error as deltalake 1.x raises it: one cause a line, coloured."""
    return "\n".join([causes[0], *(f"{' ' * (9 + i)} {_ARROW} {c}"
                                   for i, c in enumerate(causes[1:], 1))]) + "\n"


@pytest.mark.parametrize("error", [
    OSError(_chain("Generic LocalFileSystem error", "Unable to rename file",
                   "Function not implemented (os error 38)")),
    OSError(_chain("Generic LocalFileSystem error", "Unable to rename file",
                   "Operation not permitted (os error 1)")),
    OSError("Generic LocalFileSystem error: Unable to copy file from /Volumes/a/_delta_log/"
            "_commit_1.json.tmp to /Volumes/a/_delta_log/00000000000000000000.json: "
            "Function not implemented (os error 38)"),
    OSError(_chain("Generic LocalFileSystem error", "Unable to open file",
                   "Permission denied (os error 13)")),
    OSError(_chain("Generic LocalFileSystem error", "No space left on device (os error 28)")),
    OSError(_chain("Generic S3 error", "Client error with status 403 Forbidden: AccessDenied")),
    ValueError("Schema error: Fail to merge schema field 'message_id'"),
], ids=["enosys", "eperm", "enosys-0.17", "eacces", "enospc", "s3-403", "schema"])
def test_what_fails_alike_on_every_try_is_not_transient(error: Exception) -> None:
    assert not transient(error), described(error)


@pytest.mark.parametrize("error", [
    OSError(_chain("Generic S3 error", "Error after 10 retries in 181.2s, max_retries: 10, "
                   "retry_timeout: 180s", "HTTP error", "error sending request",
                   "operation timed out")),
    OSError(_chain("Generic MicrosoftAzure error", "Server returned non-2xx status code: "
                   "503 Service Unavailable")),
    OSError(_chain("Generic S3 error", "Server returned non-2xx status code: 429")),
    OSError(_chain("Generic GCS error", "connection reset by peer")),
    TimeoutError("timed out"),
    ConnectionResetError(104, "Connection reset by peer"),
    Exception("Tried committing existing table version: 7"),
], ids=["timeout", "azure-503", "s3-429", "reset", "timeouterror", "connreset", "version"])
def test_the_network_and_a_lost_commit_race_are_transient(error: Exception) -> None:
    assert transient(error), described(error)


def test_a_chained_error_is_described_in_one_line_with_its_causes() -> None:
    error = OSError(_chain("Generic LocalFileSystem error", "Unable to rename file",
                           "Function not implemented (os error 38)")
                    + "\nStack backtrace:\n   0: deltalake::write\n")
    assert described(error) == ("Generic LocalFileSystem error: Unable to rename file: "
                                "Function not implemented (os error 38)")
