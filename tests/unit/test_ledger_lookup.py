"""The Spark-free ledger reader on Delta tables written by deltalake, and `ledger show`'s lines.

Tables of three generations: before `origin`, with `origin`, and with the columns of
migration 0012 (`kafka_partition`, `topic_partitions`, `partitioner`, `actor`). No
PostgreSQL here: the staged half is tested in tests/integration/test_ledger_show.py.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from outbox_relay.errors import ConfigError, RelayError
from outbox_relay.ledger.delta_read import open_table
from outbox_relay.ledger.lookup import LedgerRecord, delta_records, merged
from outbox_relay.ledger.show import describe, not_found, partition_text

AT = dt.datetime(2026, 3, 1, 12, 0, 5, 250000, tzinfo=dt.UTC)
ORIGIN = "outbox-relay:1:2"


def write(path: Path, rows: list[dict[str, Any]], schema: pa.Schema) -> str:
    write_deltalake(str(path), pa.Table.from_pylist(rows, schema=schema))
    return str(path)


BASE = [("topic", pa.string()), ("message_id", pa.int64()), ("outcome", pa.string()),
        ("session_id", pa.string()), ("source", pa.string()),
        ("relayed_at", pa.timestamp("us", tz="UTC")), ("copy_batch", pa.int64())]
NEWEST = pa.schema([*BASE, ("origin", pa.string()), ("kafka_partition", pa.int32()),
                    ("topic_partitions", pa.int32()), ("partitioner", pa.string()),
                    ("actor", pa.string())])


def row(topic: str, message_id: int, outcome: str = "published", **more: Any) -> dict[str, Any]:
    return {"topic": topic, "message_id": message_id, "outcome": outcome, "session_id": "s-1",
            "source": "relay-a", "relayed_at": AT, "copy_batch": 1, **more}


def test_a_ledger_from_before_origin_and_partitions_answers_with_the_partition_unknown(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "old", [row("orders", 7), row("odd.topic_X-1", 7)], pa.schema(BASE))
    table = open_table(path)
    assert table is not None
    found = delta_records(table, 7, None, ORIGIN)
    assert sorted(r.topic for r in found) == ["odd.topic_X-1", "orders"]
    assert {(r.partition_known, r.kafka_partition, r.actor) for r in found} == {
        (False, None, None)}
    assert [r.topic for r in delta_records(table, 7, "orders", ORIGIN)] == ["orders"]
    assert delta_records(table, 8, None, ORIGIN) == []
    assert "partition unknown" in describe(found[0])


def sent(partition: int | None, partitioner: str | None = "murmur2") -> dict[str, Any]:
    """The 0012 columns of a record: its partition among 6, under `partitioner` (None:
    nothing recorded, as for what was never sent)."""
    return {"kafka_partition": partition, "topic_partitions": 6 if partitioner else None,
            "partitioner": partitioner}


def test_the_newest_ledger_gives_partitions_actors_and_only_this_outbox_rows(
    tmp_path: Path,
) -> None:
    rows = [
        row("orders", 1, origin=ORIGIN, **sent(3)),
        row("orders", 2, origin=ORIGIN, **sent(None)),  # keyless
        row("orders", 3, "skipped", origin=ORIGIN, **sent(None, None), actor="alice"),
        row("orders", 1, origin="outbox-relay:9:9", **sent(0)),  # another outbox
        row("orders", 4, origin=None, **sent(None, None)),  # before `origin`
    ]
    table = open_table(write(tmp_path / "new", rows, NEWEST))
    assert table is not None
    by_id = {i: delta_records(table, i, "orders", ORIGIN) for i in (1, 2, 3, 4)}
    print({i: [describe(r) for r in rs] for i, rs in by_id.items()})
    assert [(r.partition_known, r.kafka_partition) for r in by_id[1]] == [(True, 3)]
    assert "partition 3 of 6 (in the Delta ledger)" in describe(by_id[1][0])
    assert "partition chosen by the producer" in describe(by_id[2][0])
    assert by_id[3][0].actor == "alice" and "skipped" in describe(by_id[3][0])
    assert "by alice" in describe(by_id[3][0]) and "not sent to Kafka" in describe(by_id[3][0])
    assert len(by_id[4]) == 1


def test_nothing_copied_yet_reads_as_an_empty_ledger(tmp_path: Path) -> None:
    assert open_table(str(tmp_path / "absent")) is None
    (tmp_path / "empty").mkdir()
    assert open_table(str(tmp_path / "empty")) is None
    (tmp_path / "first" / "_delta_log").mkdir(parents=True)  # a first copy cut short
    assert open_table(str(tmp_path / "first")) is None


@pytest.mark.parametrize("what", ["a directory of other files", "a file"])
def test_a_path_that_is_not_a_delta_table_is_a_clear_error(tmp_path: Path, what: str) -> None:
    target = tmp_path / "ledger"
    if what == "a file":
        target.write_text("not a table")
    else:
        target.mkdir()
        (target / "part-0.parquet").write_bytes(b"PAR1")
    with pytest.raises(ConfigError, match=r"ledger\.path: .* is not a Delta table"):
        open_table(str(target))


def record(**more: Any) -> LedgerRecord:
    base: dict[str, Any] = {"topic": "orders", "message_id": 42, "outcome": "published",
                            "relayed_at": AT, "session_id": "s-1", "source": "relay-a",
                            "where": "staging"}
    return LedgerRecord(**{**base, **more})


@pytest.mark.parametrize(("more", "text"), [
    ({}, "partition unknown (this ledger does not record partitions)"),
    ({"partitioner": "murmur2", "kafka_partition": 0, "topic_partitions": 3},
     "partition 0 of 3"),
    ({"partitioner": "crc32", "topic_partitions": 3},
     "partition chosen by the producer (keyless)"),
    ({"outcome": "parked", "partitioner": "murmur2"}, "not sent to Kafka"),
    ({"outcome": "dropped", "actor": "bob"}, "not sent to Kafka"),
])
def test_partition_text(more: dict[str, Any], text: str) -> None:
    assert partition_text(record(**more)) == text


def test_a_line_names_outcome_time_session_actor_and_place() -> None:
    assert describe(record()) == (
        "message 42 of topic 'orders': published at 2026-03-01 12:00:05.250000 UTC in "
        "session s-1 by relay-a, partition unknown (this ledger does not record partitions) "
        "(staged, not yet copied to Delta)"
    )
    assert "by bob," in describe(record(outcome="dropped", actor="bob", where="delta"))
    assert describe(record(relayed_at=None)).count("an unrecorded time") == 1
    assert not_found(5, None) == "message 5 of any topic: no record in the ledger " \
        "(not relayed, or not yet)"
    assert "of topic 'a.b'" in not_found(5, "a.b")


def test_a_corrupt_delta_log_is_one_clear_line(tmp_path: Path) -> None:
    path = write(tmp_path / "t", [row("orders", 1)], pa.schema(BASE))
    (first,) = (tmp_path / "t" / "_delta_log").glob("*.json")
    first.write_text("garbage")
    with pytest.raises(RelayError, match="cannot read the Delta ledger at ") as caught:
        open_table(path)
    assert "\n" not in str(caught.value)


def test_a_record_copied_between_the_two_reads_is_kept_once_as_copied() -> None:
    def rec(session: str, where: str, minute: int) -> LedgerRecord:
        return LedgerRecord("t", 7, "published", session, "relay-a",
                            AT + dt.timedelta(minutes=minute), where)

    staged = [rec("s-2", "staging", 2), rec("s-3", "staging", 3)]
    copied = [rec("s-2", "delta", 2), rec("s-1", "delta", 1)]
    assert [(r.session_id, r.where) for r in merged(staged, copied)] == [
        ("s-1", "delta"), ("s-2", "delta"), ("s-3", "staging")]
