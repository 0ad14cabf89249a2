"""Partitions added between two writes: one key, one partition, and the ledger says which.

The relay notes a topic's partition count from Kafka before every claim and computes
explicit partitions from it. The Spark sink's producer is cached between writes, and its
metadata is refreshed only every few minutes or when it must: right after partitions are
added, it still knows the old count. A first relay run makes that producer learn the
topic at 2 partitions; partitions then grow to 5; a second run writes one key through
each shape its bytes can take (partition_key NULL and the key's bytes, partition_key
equal to the key's text or set beside another key or none), binary keys, and keyless
rows. A real consumer is the oracle: each key's records sit in one partition, and the
ledger's kafka_partition of every record is where the consumer found it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from outbox_relay.control.db import Database
from outbox_relay.ledger import staging
from outbox_relay.rules.partitioners import partition_for
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    insert,
    partitioning_bytes,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

BEFORE, AFTER = 2, 5


def _moved_keys(n: int) -> list[str]:
    """Key texts whose murmur2 partition differs between the two counts, so a record
    placed on the old count is seen in another partition than one placed on the new."""
    texts = (f"key-{i}" for i in range(1000))
    return [t for t in texts
            if partition_for("murmur2", t.encode(), BEFORE)
            != partition_for("murmur2", t.encode(), AFTER)][:n]


def _rows(topic: str) -> list[Msg]:
    """partition_key NULL rows first: in the write's one task they come before any row
    with an explicit partition the producer would have to refresh its metadata for."""
    keys = _moved_keys(6)
    first = [Msg(topic, k.encode(), f"{k}:null-pk".encode()) for k in keys]
    first += [Msg(topic, b"\xff\xfe" + bytes([i]), b"binary") for i in range(6)]
    first += [Msg(topic, None, b"keyless"), Msg(topic, None, None)]
    rest: list[Msg] = []
    for k in keys:
        rest += [Msg(topic, k.encode(), f"{k}:same".encode(), partition_key=k),
                 Msg(topic, b"other", f"{k}:other".encode(), partition_key=k),
                 Msg(topic, None, f"{k}:no-key".encode(), partition_key=k),
                 Msg(topic, k.encode(), f"{k}:null-pk-again".encode())]
    return first + rest


def _partitions_seen(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics.get(topic)
    return len(meta.partitions) if meta is not None and meta.error is None else 0


def test_a_key_stays_in_one_partition_in_the_write_after_partitions_were_added(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    tmp_path: Path,
) -> None:
    bootstrap = stack.kafka_bootstrap
    topic = unique("grow")
    create_topics(bootstrap, {topic: BEFORE})
    blocked = tmp_path / "not-a-directory"  # every copy to Delta fails: records stay staged
    blocked.write_text("")
    # One read task: the write's rows reach the one producer in id order.
    config = make_config([topic], ledger={"path": str(blocked)},
                         relay={"partitioner": "murmur2", "read_partitions": 1})
    warm = insert(migrated_url, [[Msg(topic, b"warm-up", b"v")]])
    assert run_relay(config).exit_code == EXIT_OK

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, AFTER)]).values():
        future.result()
    assert wait_for(lambda: _partitions_seen(bootstrap, topic) == AFTER, 30), \
        "the broker never reported the new partitions"

    rows = _rows(topic)
    ids = insert(migrated_url, [rows])
    written = dict(zip(ids, rows, strict=True))
    assert run_relay(config).exit_code == EXIT_OK

    got = [r for r in consume(bootstrap, [topic], expect=len(ids) + len(warm))
           if r.outbox_id in written]
    assert sorted(r.outbox_id for r in got) == sorted(ids)
    by_key: dict[bytes, set[int]] = defaultdict(set)
    for r in got:
        m = written[r.outbox_id]
        if (pbytes := partitioning_bytes(m.partition_key, m.key)) is not None:
            by_key[pbytes].add(r.partition)
    split = {k: sorted(p) for k, p in by_key.items() if len(p) > 1}

    db = Database(config.postgres, "test-lookup")
    try:
        ledger = {i: [(r["kafka_partition"], r["topic_partitions"])
                      for r in staging.staged_for(db, topic, i)] for i in ids}
    finally:
        db.close()
    expected = {r.outbox_id: [(r.partition if partitioning_bytes(
        written[r.outbox_id].partition_key, written[r.outbox_id].key) is not None else None,
        AFTER)] for r in got}
    wrong = {i: (ledger[i], expected[i]) for i in ids if ledger[i] != expected[i]}
    assert not split and not wrong, (
        f"keys written to several partitions in one write: {split}; "
        f"the ledger's (partition, count) against the consumer's: {wrong}")
