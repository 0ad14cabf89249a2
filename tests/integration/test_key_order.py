"""Per-key order end to end, over adversarial keys, read back by an independent consumer.

The ordering key is the partitioning bytes: `partition_key` as UTF-8 when it is not
NULL, else `key`. The test computes them itself from what it wrote, so rows of one key
whose bytes come from different columns (a partition_key equal to the key's text, the
empty key and the empty partition_key, a partition_key equal to another row's key) are
one key for ordering, and a reading that splits them fails.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from relay.config import Config
from relay.control.db import Database
from relay.data.partitioning import partitioning_key_col
from relay.data.read import read_current_batch
from relay.ledger.delta import Ledger
from relay.stack import StackInfo
from relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    insert,
    order_report,
    partitioning_bytes,
    query,
    unique,
)

pytestmark = pytest.mark.integration

PARTITIONS = (1, 3, 7, 3, 7)
PER_TOPIC = 2_400
KEYS = 200


def _adversarial(topic: str, n: int, rng: random.Random) -> list[Msg]:
    """`n` messages over ~200 keys in the shapes that once split one key in two."""
    texts = [f"key-{i}" for i in range(KEYS - 20)] + ["ключ-ü", "🚀", "", "a\u200bb"]
    binary = [b"\xff\xfe" + bytes([i]) for i in range(12)] + [b"\x80", b"\xc3\x28"]
    out: list[Msg] = []
    for i in range(n):
        value = f"{topic}:{i}".encode()
        shape = rng.random()
        text = rng.choice(texts)
        if shape < 0.30:  # partition_key NULL: the key's own bytes
            out.append(Msg(topic, text.encode(), value))
        elif shape < 0.80:  # partition_key equal to the key's text: the same bytes
            out.append(Msg(topic, text.encode(), value, partition_key=text))
        elif shape < 0.86:  # a partition_key that is another row's key
            out.append(Msg(topic, f"other-{rng.randrange(50)}".encode(), value,
                           partition_key=rng.choice(texts)))
        elif shape < 0.90:  # binary keys that are not UTF-8, alone
            out.append(Msg(topic, rng.choice(binary), value))
        elif shape < 0.93:  # the empty partition_key with some key: bytes b''
            out.append(Msg(topic, rng.choice(binary), value, partition_key=""))
        elif shape < 0.96:  # NULL key, partition_key set: ordered by the partition_key
            out.append(Msg(topic, None, value, partition_key=rng.choice(texts)))
        else:  # neither: no order to keep
            out.append(Msg(topic, None, value))
    return out


@pytest.mark.parametrize("read_partitions", [1, 3, 8])
@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
def test_first_appearances_follow_id_order_per_partitioning_key(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    partitioner: str, read_partitions: int,
) -> None:
    rng = random.Random(f"{partitioner}-{read_partitions}")
    topics = {unique(f"order{n}"): n for n in PARTITIONS}
    create_topics(stack.kafka_bootstrap, topics)
    msgs = [m for t in topics for m in _adversarial(t, PER_TOPIC, rng)]
    rng.shuffle(msgs)  # topics interleaved; each key's rows stay in the order written
    ids = insert(migrated_url, [msgs])
    written = dict(zip(ids, msgs, strict=True))
    config = make_config(list(topics), relay={
        "partitioner": partitioner, "read_partitions": read_partitions,
        "batch_size": 5_000})

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, list(topics), expect=len(ids), timeout_s=120)
    inversions, spread, keyless = order_report(written, got)
    print(f"{partitioner} read_partitions={read_partitions}: {len(got)} received of "
          f"{len(ids)}, {inversions} inversions, {spread} keys over several partitions, "
          f"{keyless} keyless")
    assert {r.outbox_id for r in got} == set(ids), "nothing lost"
    assert spread == 0, "every partitioning key sits in one Kafka partition"
    assert inversions == 0, "first appearances in id order per partitioning key"
    assert keyless == sum(1 for m in msgs if m.key is None and m.partition_key is None)


# Adversarial rows for the definition itself: NULLs, b'' and '', bytes that are not UTF-8,
# unicode, backslashes (escape syntax), a partition_key equal to the key's text, and one
# equal to another row's key.
EDGE_ROWS: list[tuple[str | None, bytes | None]] = [
    (None, None), (None, b""), ("", None), ("", b"x"), (None, b"\xff\xfe"), ("k1", None),
    (None, b"k1"), ("k1", b"k1"), ("k1", b"other"), (None, b"other"), ("other", b"k2"),
    ("ключ-ü🚀", None), (None, "ключ-ü🚀".encode()), (None, b"\xc3\x28"), ("\\x41", None),
    (None, b"\\x41"), ("\\101", b"A"), (None, b"A"), ("a\u200bb", b"\x00"), (None, b"\x00"),
    ("tab\there", None), (None, b"\\"), ("\\", b"\x80"),
]
SPLIT_BATCH = 7


def test_sql_and_spark_agree_on_the_partitioning_key_and_split_by_it(
    migrated_url: str, make_config: ConfigFactory, spark: SparkSession,
) -> None:
    topic = unique("pkey")
    ids = insert(migrated_url, [[Msg(topic, k, b"v", partition_key=p) for p, k in EDGE_ROWS]])
    expected = {i: partitioning_bytes(p, k) for i, (p, k) in zip(ids, EDGE_ROWS, strict=True)}
    sql = {i: None if b is None else bytes(b) for i, b in query(
        migrated_url, "SELECT id, relay_partitioning_key(partition_key, key) FROM kafka_messages")}
    assert sql == expected, "SQL relay_partitioning_key"

    # White space and a backslash: the read names its token in a connection setting.
    token = f"split test\t{topic}\\"
    stale = insert(migrated_url, [[Msg(topic, b"stale", b"v")]])
    session = ("INSERT INTO relay_sessions (session_id, batch_id, topic, lock_token, ids)"
               " VALUES (gen_random_uuid(), %s, %s, %s, %s)")
    # An earlier batch of the same token, and the same batch of another token: not read.
    query(migrated_url, session, (SPLIT_BATCH - 1, topic, token, stale))
    query(migrated_url, session, (SPLIT_BATCH + 1, topic, token + "x", stale))
    query(migrated_url, session, (SPLIT_BATCH, topic, token, ids))
    config: Config = make_config([topic])
    rows = read_current_batch(spark, config.postgres, token, 8).select(
        "id", "key_hash", partitioning_key_col().alias("pbytes"),
        F.spark_partition_id().alias("task")).collect()
    spark_bytes = {r.id: None if r.pbytes is None else bytes(r.pbytes) for r in rows}
    assert spark_bytes == expected, "Spark partitioning_key_col over the rows read"
    tasks: dict[bytes | None, set[int]] = defaultdict(set)
    hashes: dict[bytes | None, set[int]] = defaultdict(set)
    for r in rows:
        tasks[expected[r.id]].add(r.task)
        hashes[expected[r.id]].add(r.key_hash)
    assert all(len(t) == 1 for t in tasks.values()), f"one task per key: {tasks}"
    assert all(len(h) == 1 for h in hashes.values()), hashes
    assert hashes[None] == {0}, "rows with neither key nor partition_key split together"


def test_isolation_on_a_compacted_topic_never_resends_a_superseded_value(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """K:a, J:a, K:b, keyless, J:b with the relay's compaction on: K:a and J:a are
    superseded. Only the broker refuses the keyless record (stale topic config), so
    isolation delivers K:b alone. K:a must then count as compacted, not be sent after K:b;
    J:a, whose successor was not delivered, must wait and be compacted later."""
    monkeypatch.setenv("RELAY_FAILPOINTS", "stale_topic_config")
    topic = unique("compact")
    create_topics(stack.kafka_bootstrap, {topic: 1}, **{"cleanup.policy": "compact"})
    rows = [Msg(topic, b"K", b"K:a"), Msg(topic, b"J", b"J:a"), Msg(topic, b"K", b"K:b"),
            Msg(topic, None, b"keyless"), Msg(topic, b"J", b"J:b")]
    ids = insert(migrated_url, [[m] for m in rows])
    config = make_config([topic], relay={
        "topic_rules": [{"match": ".*", "compact": True, "policy": "park"}]})

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    got = sorted(consume(stack.kafka_bootstrap, [topic], expect=2), key=lambda r: r.offset)
    print("consumer saw:", [r.value for r in got])
    for key in (b"K", b"J"):
        values = [r.value for r in got if r.key == key]
        assert values and set(values) == {key + b":b"}, f"{key!r}: only the newest, {values}"
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages")[0][0] == 0
    ledger = Ledger(spark, config, Database(config.postgres))
    ledger.flush()
    outcomes = {r.message_id: r.outcome for r in ledger.table().collect()}
    assert outcomes == {ids[0]: "compacted", ids[1]: "compacted", ids[2]: "published",
                        ids[3]: "parked", ids[4]: "published"}


def test_compaction_supersedes_only_within_the_same_partitioning_bytes(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    """One record key under two partition_keys goes to two partitions, where Kafka keeps
    each one's newest value: neither may be dropped for the other."""
    topic = unique("compactpk")
    create_topics(stack.kafka_bootstrap, {topic: 7})
    rows = [Msg(topic, b"K", b"p1:a", partition_key="p1"),
            Msg(topic, b"K", b"p2:a", partition_key="p2"),
            Msg(topic, b"K", b"p1:b", partition_key="p1"),
            Msg(topic, b"K", b"K:a"), Msg(topic, b"K", b"p2:b", partition_key="p2"),
            Msg(topic, b"K", b"K:b")]
    ids = insert(migrated_url, [rows])
    config = make_config([topic], relay={
        "partitioner": "crc32", "topic_rules": [{"match": ".*", "compact": True}]})

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, [topic], expect=3)
    print("consumer saw:", sorted(r.value or b"" for r in got))
    assert sorted(r.outbox_id for r in got) == [ids[2], ids[4], ids[5]]
