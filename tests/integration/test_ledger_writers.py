"""The two writers of the ledger's copy (ledger.writer: delta-rs in the driver's Python
process, or Delta's Spark writer) on a real database: the same staged records leave the
same rows whoever copies them, each writer appends to a table the other began, a batch
Delta already has under the outbox's origin is not written twice, and staging is emptied
only once Delta holds the rows.

Records are staged as outbox_relay.control.finish stages them (rows of relay_ledger_staging);
what Delta holds is read back from the table on disk, with Spark and with delta-rs (the
`ledger show` path, outbox_relay.ledger.lookup).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

import outbox_relay.ledger.staging
from outbox_relay.control.db import Database
from outbox_relay.errors import RelayError
from outbox_relay.ledger.delta_rs import DeltaRsWriter
from outbox_relay.ledger.lookup import lookup
from outbox_relay.ledger.rows import LEDGER_COLUMNS
from outbox_relay.rules.partitioners import partition_for
from tests.integration.conftest import LedgerFactory
from tests.integration.helpers import query

pytestmark = pytest.mark.integration

STAGE = """
INSERT INTO relay_ledger_staging
    (session_id, topic, outcome, ids, source, relayed_at, partitioning_keys,
     topic_partitions, partitioner, actor)
VALUES (%s, %s, %s, %s::bigint[], 'test', %s, %s::bytea[], %s, %s, %s)
"""
AT = dt.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=dt.UTC)
KEYS: list[bytes | None] = [b"order-1", None, b"", b"\xff\xfe\x80", "ключ-ü🚀".encode(),
                            b"\x00", b"abcde"]
PARTITIONS = 5
# (session, topic, outcome, ids, keys, topic_partitions, partitioner, actor)
Staged = tuple[str, str, str, list[int], list[bytes | None] | None, int | None, str | None,
               str | None]
Writer = str


def _records() -> list[Staged]:
    """Every shape a copy meets. crc32 with a count of 0 is left out: the Spark copy
    fails on it (tests/spark/test_ledger_delta_rs.py pins that)."""
    n = len(KEYS)
    return [
        (str(uuid.uuid4()), "orders", "published", list(range(1, n + 1)), KEYS, PARTITIONS,
         "murmur2", None),
        (str(uuid.uuid4()), "orders", "published", list(range(101, 101 + n)), KEYS,
         PARTITIONS, "crc32", None),
        (str(uuid.uuid4()), "orders", "published", [201, 202], [b"k", None], 0, "murmur2",
         None),
        (str(uuid.uuid4()), "orders", "published", [301, 302], [b"k", b""], None, "crc32",
         None),
        # Staged by a relay from before the keys were kept.
        (str(uuid.uuid4()), "orders", "published", [401, 402, 403], None, None, None, None),
        (str(uuid.uuid4()), "orders", "compacted", [501, 502], None, None, None, None),
        (str(uuid.uuid4()), "payments", "parked", [601], None, None, None, None),
        (str(uuid.uuid4()), "payments", "skipped", [701, 702], None, None, None, "alice@host"),
    ]


def _stage(url: str, records: list[Staged]) -> None:
    for session, topic, outcome, ids, keys, n, partitioner, actor in records:
        query(url, STAGE, (session, topic, outcome, ids, AT, keys, n, partitioner, actor))


def _expected_partitions(records: list[Staged]) -> dict[int, int | None]:
    """The reference partitioners' answer (pinned to the real clients elsewhere)."""
    out: dict[int, int | None] = {}
    for _, _, _, ids, keys, n, partitioner, _ in records:
        for i, key in zip(ids, keys or [None] * len(ids), strict=True):
            known = key is not None and n and partitioner in ("murmur2", "crc32")
            out[i] = partition_for(partitioner, key, n) if known else None  # type: ignore[arg-type]
    return out


def _staged_count(url: str) -> int:
    return int(query(url, "SELECT count(*) FROM relay_ledger_staging")[0][0])


def _spark_rows(spark: SparkSession, path: Path) -> list[dict[str, Any]]:
    rows = spark.read.format("delta").load(str(path)).select(*LEDGER_COLUMNS).collect()
    return [{**r.asDict(), "relayed_at": r.relayed_at.astimezone(dt.UTC)} for r in rows]


def _rs_rows(path: Path) -> list[dict[str, Any]]:
    return [{c: r[c] for c in LEDGER_COLUMNS}
            for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist()]


def _without_batch(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    # Each copy of the same records takes its own number from the copy sequence.
    return sorted((tuple(v for k, v in r.items() if k != "copy_batch") for r in rows), key=repr)


def _engines(path: Path) -> list[str]:
    """Who made each commit of the table, oldest first: delta-rs or Spark."""
    out = []
    for commit in reversed(DeltaTable(str(path)).history()):
        if commit.get("operation") not in ("WRITE", "CREATE TABLE"):
            continue
        engine = str(commit.get("engineInfo") or commit.get("clientVersion") or "")
        out.append("delta-rs" if "delta-rs" in engine else
                   "spark" if "Spark" in engine else engine)
    return out


def test_both_writers_leave_the_same_ledger_rows_for_the_same_staged_records(
    spark: SparkSession, migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
) -> None:
    records = _records()
    copies: dict[Writer, Path] = {}
    for writer in ("delta-rs", "spark"):
        _stage(migrated_url, records)  # the same sessions, ids and keys each time
        copies[writer] = tmp_path / f"ledger-{writer}"
        ledger = make_ledger(writer, copies[writer])
        assert ledger.flush() == 1
        assert _staged_count(migrated_url) == 0
        assert _engines(copies[writer]) == [writer]

    total = sum(len(r[3]) for r in records)
    by_spark = {w: _spark_rows(spark, p) for w, p in copies.items()}
    by_rs = {w: _rs_rows(p) for w, p in copies.items()}
    print({w: len(rows) for w, rows in by_spark.items()}, by_spark["delta-rs"][:2])
    assert len(by_spark["delta-rs"]) == total
    assert _without_batch(by_spark["delta-rs"]) == _without_batch(by_spark["spark"])
    assert _without_batch(by_rs["delta-rs"]) == _without_batch(by_rs["spark"])
    assert _without_batch(by_rs["delta-rs"]) == _without_batch(by_spark["delta-rs"])
    assert {r["copy_batch"] for r in by_spark["delta-rs"]} == {1}
    assert {r["copy_batch"] for r in by_spark["spark"]} == {2}
    expected = _expected_partitions(records)
    for writer, rows in by_spark.items():
        assert {r["message_id"]: r["kafka_partition"] for r in rows} == expected, writer
        assert {r["relayed_at"] for r in rows} == {AT}, writer

    # `ledger show`'s reading (delta-rs, no JVM) finds each message in either copy alike.
    db = ledger.db
    for message_id, topic in ((2, "orders"), (4, "orders"), (701, "payments")):
        found = {w: [(e.outcome, e.kafka_partition, e.actor, e.where, e.relayed_at)
                     for e in lookup(db, str(p), message_id, topic)]
                 for w, p in copies.items()}
        assert found["delta-rs"] == found["spark"] != []
        assert [f[3] for f in found["spark"]] == ["delta"]


@pytest.mark.parametrize("first, then", [("spark", "delta-rs"), ("delta-rs", "spark")])
def test_a_table_begun_by_one_writer_takes_the_other_writer_s_copies(
    spark: SparkSession, migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
    first: Writer, then: Writer,
) -> None:
    path = tmp_path / "ledger"
    records = _records()
    _stage(migrated_url, records[:4])
    assert make_ledger(first, path).flush() == 1
    _stage(migrated_url, records[4:])
    second = make_ledger(then, path)
    assert second.flush() == 1

    assert _engines(path) == [first, then]
    assert _staged_count(migrated_url) == 0
    rows = _spark_rows(spark, path)
    assert Counter(r["copy_batch"] for r in rows) == Counter(
        {1: sum(len(r[3]) for r in records[:4]), 2: sum(len(r[3]) for r in records[4:])})
    assert {r["message_id"]: r["kafka_partition"] for r in rows} == _expected_partitions(records)
    assert _without_batch(_rs_rows(path)) == _without_batch(rows)
    assert {r["origin"] for r in rows} == {second.origin}


def _tag(url: str, batch: int) -> None:
    query(url, "UPDATE relay_ledger_staging SET copy_batch = %s WHERE copy_batch IS NULL",
          (batch,))


def test_a_copy_batch_the_origin_already_has_is_not_written_twice(
    migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
) -> None:
    path = tmp_path / "ledger"
    ledger = make_ledger("delta-rs", path)
    records = _records()
    total = sum(len(r[3]) for r in records)
    _stage(migrated_url, records)
    _tag(migrated_url, 1)
    writer = DeltaRsWriter(str(path), ledger.db, lambda: ledger.origin)

    writer.write(1)
    writer.write(1)  # a replay after a crash between the commit and staging's delete

    table = DeltaTable(str(path))
    assert table.to_pyarrow_table().num_rows == total
    assert table.version() == 0, "one commit"
    assert table.transaction_version(ledger.origin) == 1
    assert sum(writer.held(1).values()) == total
    assert writer.last_batch() == 1
    # The copy that finds the batch still staged skips the write and only deletes it.
    assert ledger.flush() == 1
    assert DeltaTable(str(path)).to_pyarrow_table().num_rows == total
    assert _staged_count(migrated_url) == 0


def test_a_batch_numbered_below_what_delta_has_is_retagged_and_written_once(
    migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
) -> None:
    """The copy sequence went back (a restored database): Delta skips the new batch's
    number, and the copy writes it again under a number above the highest it holds."""
    path = tmp_path / "ledger"
    ledger = make_ledger("delta-rs", path)
    records = _records()
    _stage(migrated_url, records[:2])
    _tag(migrated_url, 40)
    DeltaRsWriter(str(path), ledger.db, lambda: ledger.origin).write(40)
    query(migrated_url, "DELETE FROM relay_ledger_staging")
    _stage(migrated_url, records[2:])

    assert ledger.flush() == 1

    rows = _rs_rows(path)
    assert Counter(r["copy_batch"] for r in rows) == Counter(
        {40: sum(len(r[3]) for r in records[:2]), 41: sum(len(r[3]) for r in records[2:])})
    assert _staged_count(migrated_url) == 0


@pytest.mark.parametrize("writer", ["delta-rs", "spark"])
def test_staging_is_emptied_only_once_delta_holds_the_rows(
    migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, writer: Writer,
) -> None:
    path = tmp_path / "ledger"
    records = _records()
    total = sum(len(r[3]) for r in records)
    _stage(migrated_url, records)
    in_delta_at_removal: list[int] = []
    remove = outbox_relay.ledger.staging.remove_batch

    def watched(db: Database, backend: int, copy_batch: int) -> None:
        in_delta_at_removal.append(DeltaTable(str(path)).to_pyarrow_table().num_rows)
        remove(db, backend, copy_batch)

    monkeypatch.setattr(outbox_relay.ledger.staging, "remove_batch", watched)
    assert make_ledger(writer, path).flush() == 1
    assert in_delta_at_removal == [total]
    assert _staged_count(migrated_url) == 0


@pytest.mark.parametrize("writer", ["delta-rs", "spark"])
def test_a_failed_write_leaves_every_record_staged_for_the_next_copy(
    migrated_url: str, make_ledger: LedgerFactory, tmp_path: Path, writer: Writer,
) -> None:
    blocked = tmp_path / "not-a-directory"  # no Delta table can be written here
    blocked.write_text("")
    records = _records()
    _stage(migrated_url, records)
    staged = _staged_count(migrated_url)

    with pytest.raises(Exception) as failed:
        make_ledger(writer, blocked).flush()
    print(f"{writer}: {type(failed.value).__name__}: {str(failed.value)[:200]}")
    if writer == "delta-rs":
        assert isinstance(failed.value, RelayError)
    assert _staged_count(migrated_url) == staged

    path = tmp_path / "ledger"
    assert make_ledger(writer, path).flush() == 1
    assert len(_rs_rows(path)) == sum(len(r[3]) for r in records)
    assert _staged_count(migrated_url) == 0
