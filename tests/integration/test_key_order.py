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

from outbox_relay.config import Config
from outbox_relay.control.db import Database
from outbox_relay.data.partitioning import partitioning_key_col
from outbox_relay.data.read import read_current_batch
from outbox_relay.ledger.delta import Ledger
from outbox_relay.rules.partitioners import partition_for
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
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
from tests.integration.two_brokers import (  # noqa: F401  (fixtures)
    TwoBrokers,
    cluster_fixture,
    two_brokers_fixture,
)
from tests.lanes import LANES, on_lane

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


# The executors' read splits a batch into `read_partitions` tasks; the driver reads it whole.
@pytest.mark.parametrize(("lane", "read_partitions"),
                         [("spark", 1), ("spark", 3), ("spark", 8), ("direct", 1)])
@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
def test_first_appearances_follow_id_order_per_partitioning_key(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    partitioner: str, read_partitions: int, lane: str,
) -> None:
    rng = random.Random(f"{partitioner}-{read_partitions}-{lane}")
    topics = {unique(f"order{n}"): n for n in PARTITIONS}
    create_topics(stack.kafka_bootstrap, topics)
    msgs = [m for t in topics for m in _adversarial(t, PER_TOPIC, rng)]
    rng.shuffle(msgs)  # topics interleaved; each key's rows stay in the order written
    ids = insert(migrated_url, [msgs])
    written = dict(zip(ids, msgs, strict=True))
    config = on_lane(make_config(list(topics), relay={
        "partitioner": partitioner, "read_partitions": read_partitions,
        "batch_size": 5_000}), lane)

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


# Where each case's partly failed write fails: J's partition, led by node 2, while K's
# partition (node 1) acknowledges. "leader down": node 2 is stopped before the write, so
# J's records time out. "broker refuses": J's first row has no record key, which only the
# broker refuses on a compacted topic (the failpoint plays a config read before the topic
# turned compacted); its partition_key still puts it on J's partition.
FAILURES = ["leader down", "broker refuses"]
LEADERS = [1, 2, 1, 2]


def _led_by(node: int, candidates: list[bytes]) -> bytes:
    """The first of `candidates` whose partition (murmur2, as the relay's default) has
    `node` as its leader."""
    return next(c for c in candidates
                if LEADERS[partition_for("murmur2", c, len(LEADERS))] == node)


def _superseding_rows(topic: str, failure: str) -> tuple[list[Msg], set[int]]:
    """The rows, each its own transaction, and the indexes of those the claim supersedes.

    K (node 1) is written as key K and then as key K with partition_key K: the same
    partitioning bytes, so K's second row supersedes its first. B is a binary key on
    node 1. X has K's record key under other partitioning bytes, so nothing supersedes it.
    J (node 2) fails; J's later row has J's bytes from `key` alone.
    """
    k = _led_by(1, [f"K{i}".encode() for i in range(64)])
    b = _led_by(1, [b"\xff" + bytes([i]) for i in range(64)])
    j = _led_by(2, [f"J{i}".encode() for i in range(64)])
    refuses = failure == "broker refuses"
    rows = [
        Msg(topic, k, b"K:v1"),
        Msg(topic, b, b"B:v1"),
        Msg(topic, k, b"X:v1", partition_key="X"),
        Msg(topic, None if refuses else j, b"J:v1", partition_key=j.decode() if refuses else None),
        Msg(topic, k, b"K:v2", partition_key=k.decode()),
        Msg(topic, b, b"B:v2"),
        Msg(topic, j, b"J:v2"),
    ]
    if not refuses:  # a keyless record: the topic is compacted in Kafka only when it refuses
        rows.insert(5, Msg(topic, None, b"keyless"))
    superseded = {0, 1} if refuses else {0, 1, 3}
    return rows, superseded


@pytest.mark.parametrize("lane", LANES)
@pytest.mark.parametrize("policy", ["block", "park"])
@pytest.mark.parametrize("failure", FAILURES)
def test_a_superseded_value_is_never_sent_after_a_partly_failed_write(
    cluster: TwoBrokers, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, failure: str, policy: str, lane: str,
) -> None:
    """One claim supersedes K:v1 and B:v1 and sends K:v2 and B:v2 with J's rows, on four
    partitions over two brokers. J's partition fails while K's acknowledges, so the
    write fails as a whole with K:v2 in Kafka. Whatever isolation, the policy and the
    retries make of that, no key's older value may appear after a newer one, and every
    id ends published, compacted, parked or still waiting, once."""
    topic = unique(f"compact-{policy}")
    refuses = failure == "broker refuses"
    cluster.create_topic(topic, LEADERS, **({"cleanup.policy": "compact"} if refuses else {}))
    rows, superseded = _superseding_rows(topic, failure)
    ids = insert(migrated_url, [[m] for m in rows])
    written = dict(zip(ids, rows, strict=True))
    config = on_lane(make_config([topic], kafka={
        "bootstrap_servers": cluster.bootstrap, "delivery_timeout_ms": 4000,
        "request_timeout_ms": 2000}, relay={
        "read_partitions": 2, "available_now_deadline_s": 15,
        "topic_rules": [{"match": ".*", "compact": True, "policy": policy}]}), lane)
    if refuses:
        monkeypatch.setenv("RELAY_FAILPOINTS", "stale_topic_config")
    else:
        cluster.stop_node2()

    first = run_relay(config)

    waiting = {i for (i,) in query(migrated_url, "SELECT id FROM kafka_messages")}
    parked = {i for (i,) in query(migrated_url, "SELECT id FROM relay_parked_messages")}
    print(f"{failure}, {policy}: exit {first.exit_code}, waiting {sorted(waiting)}, "
          f"parked {sorted(parked)}")
    assert waiting or parked, "J's partition failed: its rows wait or are parked"
    if not refuses:
        cluster.start_node2()
        cluster.wait_led(topic, len(LEADERS))
        again = config.model_copy(update={"relay": config.relay.model_copy(
            update={"checkpoint_path": config.relay.checkpoint_path + "-2"})})
        assert run_relay(again).exit_code == EXIT_OK

    got = consume(cluster.bootstrap, [topic], expect=1)
    print("consumer saw:", [(r.partition, r.value) for r in sorted(
        got, key=lambda r: (r.partition, r.offset))])
    inversions, spread, _ = order_report(written, got)
    assert {r.value for r in got if r.key == rows[0].key} >= {b"K:v2"}, "K:v2 reached Kafka"
    assert inversions == 0 and spread == 0, "first appearances in id order per key"
    assert not {ids[n] for n in superseded} & {r.outbox_id for r in got}, "superseded: unsent"
    parked = {i for (i,) in query(migrated_url, "SELECT id FROM relay_parked_messages")}
    waiting = {i for (i,) in query(migrated_url, "SELECT id FROM kafka_messages")}
    ledger = Ledger(spark, config, Database(config.postgres))
    ledger.flush()
    records = [(r.message_id, r.outcome) for r in ledger.table().collect()]
    outcomes = dict(records)
    assert len(outcomes) == len(records), f"one ledger record per id: {records}"
    assert {ids[n]: outcomes.get(ids[n]) for n in superseded} == dict.fromkeys(
        (ids[n] for n in superseded), "compacted")
    assert {i for i, o in outcomes.items() if o == "parked"} == parked
    published = {i for i, o in outcomes.items() if o == "published"}
    # A failed write may have put a row in Kafka that then waits, or is parked with its
    # key (a later produce batch of J's partition can pass while the refused one fails).
    sent = {r.outbox_id for r in got}
    assert published <= sent <= published | waiting | parked, "published: in Kafka"
    assert set(outcomes) | waiting == set(ids) and not set(outcomes) & waiting, \
        "every id accounted for once"
    if refuses and policy == "block" and lane == "spark":
        # The Spark lane knows only that its write failed: isolation keeps the id-order
        # prefix before J's refused row, and the rest waits.
        assert sorted(waiting) == ids[3:], "the topic waits at J's refused row"
    elif refuses and policy == "block":
        # The direct lane knows each record's fate: J's rows wait, and the others'
        # acknowledged records are done. But the broker's refusal is fatal to the
        # idempotent producer (the gap-less guarantee), which fails every record whose
        # report had not come: those are isolated as the Spark lane's are, and what
        # follows J's refused row in id order may wait with it.
        assert {ids[3], ids[6]} <= waiting <= set(ids[3:]), "the topic waits at J's refused row"
    elif refuses:
        assert parked == {ids[3], ids[6]}, "J's refused row parked, J's later row with it"
    else:
        assert not waiting and not parked, "drained once node 2 is back"


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
