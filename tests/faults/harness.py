"""The fault suite's tools: real relay processes, an outbox writer that remembers what it
wrote, test-only triggers that record lock and fencing events, an independent consumer,
and the checks every scenario shares (lost, duplicated, per-key order of first
appearances).

Nothing here sleeps for a fixed time that assumes a fast machine: every wait is a
condition with a generous deadline, because other test sessions share the cores.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from relay.config import Config
from relay.config_load import build_config
from relay.control.db import Database
from relay.control.migrate import migrate
from relay.wiring import DRAIN_SUFFIX
from tests.integration.helpers import partitioning_bytes
from tests.integration.process import write_profile

REPO = Path(__file__).resolve().parents[2]
ID_HEADER = "outbox-relay.id"
SOURCE_HEADER = "outbox-relay.source"

# Environment variables the relay reads; a child gets only the ones a test passes, so a
# shell pointed at another stack (`eval "$(outbox-relay stack env)"`) can't redirect it.
_RELAY_ENV = (
    "RELAY_POSTGRES_URL", "RELAY_POSTGRES_PASSWORD", "RELAY_KAFKA_BOOTSTRAP_SERVERS",
    "RELAY_LEDGER_PATH", "RELAY_CHECKPOINT_PATH", "RELAY_SOURCE_NAME", "RELAY_FAILPOINTS",
    "RELAY_WATCH_PID", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET",
)


# --------------------------------------------------------------------------- waiting

def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str,
               interval_s: float = 0.25, diagnose: Callable[[], str] | None = None) -> float:
    """Poll `predicate` until it holds; returns the seconds waited, or fails naming `what`."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        if predicate():
            return time.monotonic() - started
        if time.monotonic() >= deadline:
            extra = f"\n{diagnose()}" if diagnose else ""
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{extra}")
        time.sleep(interval_s)


# --------------------------------------------------------------------------- databases

def database_url(admin_url: str, name: str) -> str:
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


def create_database(admin_url: str) -> str:
    """A new, migrated database on the server of `admin_url`; returns its URL."""
    name = f"f_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')  # a generated identifier
    finally:
        conn.close()
    url = database_url(admin_url, name)
    config = build_config({"postgres": {"url": url, "sslmode": "disable"}}, env={})
    db = Database(config.postgres)
    try:
        migrate(db)
    finally:
        db.close()
    install_recorders(url)
    return url


def drop_database(admin_url: str, url: str) -> None:
    name = url.rpartition("/")[2]
    with contextlib.suppress(psycopg2.Error):
        conn = psycopg2.connect(admin_url, connect_timeout=10)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            conn.close()


def query(url: str, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(url, connect_timeout=10)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def scalar(url: str, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
    return query(url, sql, params)[0][0]


def outbox_count(url: str) -> int:
    return int(scalar(url, "SELECT count(*) FROM kafka_messages"))


# Test-only instrumentation. lock_events: every change of a topic's owner, with the
# database's clock and the lock time the previous owner had last renewed. fence_events:
# every claim, every end of a session and every delete from the outbox, with the topic's
# lock holder seen inside the very transaction that did it.
RECORDERS = """
CREATE TABLE IF NOT EXISTS fault_lock_events (
    seq bigserial PRIMARY KEY, topic varchar, old_owner varchar, new_owner varchar,
    old_locked_at timestamp, new_locked_at timestamp,
    at timestamp NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC')
);
CREATE TABLE IF NOT EXISTS fault_fence_events (
    seq bigserial PRIMARY KEY, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    kind varchar NOT NULL, topic varchar, token varchar, holder varchar, rows bigint,
    ids bigint[], session_id uuid,
    at timestamp NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC')
);
CREATE OR REPLACE FUNCTION fault_record_lock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.locked_by IS DISTINCT FROM OLD.locked_by THEN
        INSERT INTO fault_lock_events (topic, old_owner, new_owner, old_locked_at, new_locked_at)
        VALUES (NEW.topic, OLD.locked_by, NEW.locked_by, OLD.locked_at, NEW.locked_at);
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION fault_record_session() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
    INSERT INTO fault_fence_events (kind, topic, token, holder, rows, ids, session_id)
    VALUES (CASE WHEN TG_OP = 'INSERT' THEN 'claim' ELSE 'session_end' END, r.topic,
            r.lock_token,
            (SELECT locked_by FROM kafka_topic_info i WHERE i.topic = r.topic),
            cardinality(r.ids), CASE WHEN TG_OP = 'INSERT' THEN r.ids END, r.session_id);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION fault_record_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fault_fence_events (kind, topic, holder, rows)
    SELECT 'delete', g.topic, (SELECT locked_by FROM kafka_topic_info i WHERE i.topic = g.topic),
           count(*)
    FROM gone g GROUP BY g.topic;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS fault_lock_events ON kafka_topic_info;
CREATE TRIGGER fault_lock_events AFTER UPDATE ON kafka_topic_info
    FOR EACH ROW EXECUTE FUNCTION fault_record_lock();
DROP TRIGGER IF EXISTS fault_sessions ON relay_sessions;
CREATE TRIGGER fault_sessions AFTER INSERT OR DELETE ON relay_sessions
    FOR EACH ROW EXECUTE FUNCTION fault_record_session();
DROP TRIGGER IF EXISTS fault_deletes ON kafka_messages;
CREATE TRIGGER fault_deletes AFTER DELETE ON kafka_messages
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION fault_record_delete();
"""


def install_recorders(url: str) -> None:
    query(url, RECORDERS)


@dataclass(frozen=True)
class Ownership:
    """What the lock and fence recorders saw."""

    owners: set[str]
    takeovers: list[tuple[str, str, str, float]]  # topic, old, new, seconds since renewal
    live_takeovers: list[tuple[str, str, str, float]]  # taken while the old lock was fresh
    unfenced: list[str]  # deletes by a process that did not hold the topic's lock
    stale_claims: list[str]  # claims made while another process held the lock


def ownership(url: str, lock_timeout_s: float) -> Ownership:
    """Check that a topic never had two owners at once, and that every claim and every
    delete of outbox rows was done by the process holding the topic's lock."""
    events = query(url, "SELECT topic, old_owner, new_owner, "
                   "extract(epoch FROM at - old_locked_at)::float "
                   "FROM fault_lock_events ORDER BY seq")
    owners = {new for _, _, new, _ in events if new is not None}
    takeovers = [(t, old, new, age) for t, old, new, age in events
                 if old is not None and new is not None and old != new]
    # A lock may pass straight to another process only once it has expired.
    live = [x for x in takeovers if x[3] is None or x[3] < lock_timeout_s]
    # A claim by a process that no longer holds the lock is a send by the wrong owner:
    # every claim must check the token and an unexpired lock (issue 8, fencing), so the
    # scenarios assert there is none.
    stale_claims = [
        f"claim of {topic} by {token} while {holder} held it"
        for topic, token, holder in query(
            url, "SELECT topic, token, holder FROM fault_fence_events "
            "WHERE kind = 'claim' AND token IS DISTINCT FROM holder")
    ]
    # Every delete that ends a session: the session's token held the lock at that moment.
    unfenced = [
        f"delete of {rows} rows of {topic} in a transaction of {tokens} while {holder} held it"
        for topic, rows, holder, tokens in query(url, """
            SELECT d.topic, d.rows, d.holder, array_agg(DISTINCT s.token)
            FROM fault_fence_events d
            JOIN fault_fence_events s
              ON s.xid = d.xid AND s.topic = d.topic AND s.kind = 'session_end'
            WHERE d.kind = 'delete'
            GROUP BY d.seq, d.topic, d.rows, d.holder
            HAVING d.holder IS NULL OR NOT d.holder = ALL(array_agg(s.token))
        """)
    ]
    # Any other delete (parking): the lock was held by somebody relaying.
    unfenced += [
        f"delete of {rows} rows of {topic} without a lock holder"
        for topic, rows in query(url, """
            SELECT d.topic, d.rows FROM fault_fence_events d
            WHERE d.kind = 'delete' AND d.holder IS NULL
        """)
    ]
    return Ownership(owners, takeovers, live, unfenced, stale_claims)


def unfinished_claims(url: str) -> set[int]:
    """Ids of every session that did not end by deleting its rows (killed, failed, fenced
    off): the only messages a relay may send twice.

    Such a session either ended in a transaction that deleted nothing of its topic, or
    left its rows to a later claim: an id claimed twice was not deleted by its first
    session. The transaction alone cannot tell the second case, since a finish drops its
    relay's unfinished sessions in the same transaction that deletes the rows it claimed
    again (a crash between a write and its finish, scenario 3).
    """
    rows = query(url, """
        SELECT c.ids FROM fault_fence_events c
        WHERE c.kind = 'claim' AND NOT EXISTS (
            SELECT 1 FROM fault_fence_events e
            JOIN fault_fence_events d ON d.xid = e.xid AND d.topic = e.topic AND d.kind = 'delete'
            WHERE e.kind = 'session_end' AND e.session_id = c.session_id)
        UNION ALL
        SELECT array_agg(id) FROM (
            SELECT id FROM fault_fence_events c, unnest(c.ids) AS id
            WHERE c.kind = 'claim' GROUP BY id HAVING count(*) > 1) again
    """)
    return {i for (ids,) in rows if ids for i in ids}


def outbox_ids(url: str) -> set[int]:
    return {i for (i,) in query(url, "SELECT id FROM kafka_messages")}


def session_ids(url: str) -> set[int]:
    """Ids claimed by sessions that exist right now."""
    return {i for (ids,) in query(url, "SELECT ids FROM relay_sessions") for i in ids}


# --------------------------------------------------------------------------- topics

def create_topics(bootstrap: str, topics: dict[str, int], **config: str) -> None:
    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, num_partitions=n, replication_factor=1, config=dict(config))
           for t, n in topics.items()]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- the outbox

@dataclass(frozen=True)
class Msg:
    topic: str
    key: bytes | None
    value: bytes | None
    partition_key: str | None = None
    headers: Any = None  # a JSON object of strings, or anything else to test refusals

    @property
    def ordering_key(self) -> bytes | None:
        """The partitioning bytes: rows with equal bytes are one key for ordering,
        whichever column the bytes came from; None orders nothing."""
        return partitioning_bytes(self.partition_key, self.key)


@dataclass(frozen=True)
class Written:
    id: int
    msg: Msg
    tx: int  # index into Outbox.transactions


@dataclass
class Tx:
    begin_seq: int
    commit_seq: int | None = None
    ids: list[int] = field(default_factory=list)


INSERT = """
INSERT INTO kafka_messages (topic, message, key, partition_key, headers)
VALUES %s RETURNING id
"""


class Outbox:
    """Writes messages the way an application does and remembers every one of them.

    Each transaction records when it began and committed on one logical clock, so the
    order checks know which transactions were serialised (DESIGN.md invariant 2).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.written: dict[int, Written] = {}
        self.transactions: list[Tx] = []
        self._clock = 0
        self._conn: psycopg2.extensions.connection | None = None

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _connection(self) -> psycopg2.extensions.connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg2.connect(self.url, connect_timeout=10)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def write(self, transactions: Iterable[Sequence[Msg]]) -> list[int]:
        """One committed database transaction per inner sequence, one after another."""
        ids: list[int] = []
        conn = self._connection()
        for msgs in transactions:
            tx = self.begin_on(conn)
            with conn.cursor() as cur:
                ids += tx.insert(cur, msgs)
            conn.commit()
            tx.committed()
        return ids

    def begin_on(self, conn: psycopg2.extensions.connection) -> OpenTx:
        tx = Tx(begin_seq=self._tick())
        self.transactions.append(tx)
        return OpenTx(self, conn, tx, len(self.transactions) - 1)

    @contextlib.contextmanager
    def held_open(self) -> Iterator[OpenTx]:
        """A transaction on a connection of its own, committed when the block ends."""
        conn = psycopg2.connect(self.url, connect_timeout=10)
        try:
            tx = self.begin_on(conn)
            yield tx
            conn.commit()
            tx.committed()
        finally:
            conn.close()

    def ids(self) -> set[int]:
        return set(self.written)


class OpenTx:
    def __init__(self, outbox: Outbox, conn: psycopg2.extensions.connection, tx: Tx,
                 index: int) -> None:
        self.outbox = outbox
        self.conn = conn
        self.tx = tx
        self.index = index

    def insert(self, cur: Any, msgs: Sequence[Msg]) -> list[int]:
        if not msgs:
            return []
        rows = [(m.topic, m.value, m.key, m.partition_key,
                 json.dumps(m.headers) if m.headers is not None else None) for m in msgs]
        template = "(%s, %s, %s, %s, %s::jsonb)"
        got = psycopg2.extras.execute_values(cur, INSERT, rows, template=template,
                                             page_size=len(rows), fetch=True)
        ids = [r[0] for r in got]
        # RETURNING follows the VALUES order; the ids must be increasing within a tx.
        assert ids == sorted(ids), "ids of one statement come back in order"
        for i, m in zip(ids, msgs, strict=True):
            self.outbox.written[i] = Written(i, m, self.index)
        self.tx.ids += ids
        return ids

    def add(self, msgs: Sequence[Msg]) -> list[int]:
        with self.conn.cursor() as cur:
            return self.insert(cur, msgs)

    def committed(self) -> None:
        self.tx.commit_seq = self.outbox._tick()


def traffic(topics: Sequence[str], n: int, *, per_tx: int, keys: int, value_bytes: int,
            seed: int, tag: str = "") -> list[list[Msg]]:
    """`n` messages in transactions of `per_tx`, spread over topics and keys at random,
    in every shape of `shaped`. Every value is unique, so a delivered record is matched
    to what was written."""
    rng = random.Random(seed)
    txs: list[list[Msg]] = []
    for start in range(0, n, per_tx):
        tx = []
        for i in range(start, min(n, start + per_tx)):
            topic = topics[rng.randrange(len(topics))]
            head = f"{tag}{i}:".encode()
            value = head + b"x" * max(0, value_bytes - len(head))
            tx.append(shaped(topic, f"key-{rng.randrange(keys)}", value, rng))
        txs.append(tx)
    return txs


def shaped(topic: str, key_text: str, value: bytes, rng: random.Random, *,
           keyless: bool = True) -> Msg:
    """A message of the key `key_text` in one of the shapes that once split one key's
    rows between two writers: partition_key NULL, equal to the key's text, or naming it
    over another record key; binary keys that are not UTF-8; the empty key b'' and the
    empty partition_key '' (one key); NULL keys with and without a partition_key, unless
    `keyless` is off (a keyless record is poison on a compacted topic)."""
    key = key_text.encode()
    shape = rng.random()
    if shape < 0.30:
        return Msg(topic, key, value)
    if shape < 0.72:
        return Msg(topic, key, value, partition_key=key_text)
    if shape < 0.80:
        return Msg(topic, b"other-" + key, value, partition_key=key_text)
    if shape < 0.85:
        return Msg(topic, b"\xff\xfe" + key, value)
    if shape < 0.88:
        return Msg(topic, b"", value)
    if shape < 0.91:
        return Msg(topic, b"\xc3\x28" + key, value, partition_key="")
    if not keyless:
        return Msg(topic, key, value, partition_key=key_text)
    if shape < 0.96:
        return Msg(topic, None, value, partition_key=key_text)
    return Msg(topic, None, value)


# --------------------------------------------------------------------------- consumer

@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]

    @property
    def outbox_id(self) -> int:
        return int(self.headers[ID_HEADER])


def read_all(bootstrap: str, topics: Sequence[str], timeout_s: float = 300.0,
             conf: Mapping[str, str] | None = None) -> list[Record]:
    """Every record of `topics` up to their current end, read with partitions assigned
    directly (no consumer group) from the low to the high watermark. `conf` adds client
    settings (e.g. SASL credentials)."""
    consumer = Consumer({
        **(conf or {}),
        "bootstrap.servers": bootstrap,
        "group.id": unique("fault-verify"),
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "fetch.max.bytes": 16 * 1024 * 1024,
    })
    out: list[Record] = []
    try:
        ends: dict[tuple[str, int], int] = {}
        assign = []
        for (topic, p), high in high_watermarks(bootstrap, topics, conf).items():
            low, _ = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[(topic, p)] = high
                assign.append(TopicPartition(topic, p, low))
        if not assign:
            return out
        consumer.assign(assign)
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"verification consumer: {msg.error()}")
            topic, part, offset = msg.topic(), msg.partition(), msg.offset()
            out.append(Record(topic, part, offset, msg.key(), msg.value(),
                              {k: v for k, v in (msg.headers() or [])}))
            if (topic, part) in ends and offset + 1 >= ends[(topic, part)]:
                del ends[(topic, part)]
        assert not ends, f"could not read to the end of {sorted(ends)} in {timeout_s:.0f} s"
    finally:
        consumer.close()
    return out


# --------------------------------------------------------------------------- verdicts

@dataclass
class Verdict:
    """What an independent consumer saw, against what the outbox held."""

    written: int
    expected: int
    delivered: int
    duplicates: int  # records beyond the first of each id
    lost: list[int]
    unexpected: list[int]  # delivered although they should not be (e.g. parked)
    corrupt: list[int]  # delivered with other bytes, key or topic than written
    copies: Counter[int]
    order_violations: int  # messages whose first appearance broke invariant 2
    worst_key_violations: int  # the most in one key
    keys_split: int  # keys found in more than one partition
    violations_by_topic: Counter[str] = field(default_factory=Counter)
    duplicates_by_topic: Counter[str] = field(default_factory=Counter)

    def figures(self) -> dict[str, Any]:
        return {
            "written": self.written,
            "expected": self.expected,
            "delivered": self.delivered,
            "duplicated": self.duplicates,
            "lost": len(self.lost),
            "order_violations": self.order_violations,
            "worst_key_order_violations": self.worst_key_violations,
        }

    @property
    def duplicated_ids(self) -> set[int]:
        return {i for i, n in self.copies.items() if n > 1}

    def assert_clean(self, max_duplicates: int | None = 0) -> None:
        assert not self.lost, f"{len(self.lost)} messages lost, e.g. {self.lost[:10]}"
        assert not self.unexpected, f"delivered but should not be: {self.unexpected[:10]}"
        assert not self.corrupt, f"delivered with other bytes: {self.corrupt[:10]}"
        assert self.order_violations == 0, (
            f"{self.order_violations} per-key order violations "
            f"(worst key: {self.worst_key_violations})")
        assert self.keys_split == 0, f"{self.keys_split} keys spread over partitions"
        if max_duplicates is not None:
            assert self.duplicates <= max_duplicates, (
                f"{self.duplicates} duplicates, more than the bound {max_duplicates}")


def verdict(outbox: Outbox, records: Sequence[Record],
            expected: set[int] | None = None) -> Verdict:
    """Compare what was delivered with what was written.

    `expected` are the ids that should arrive (default: every id written). Order: for
    each topic and partitioning key, a message's first appearance must come after the
    first appearance of every message of a transaction that committed before its own
    began, and after the lower ids of its own transaction.
    """
    expected = outbox.ids() if expected is None else expected
    copies: Counter[int] = Counter()
    first: dict[int, Record] = {}
    corrupt: list[int] = []
    ordered = sorted(records, key=lambda r: (r.topic, r.partition, r.offset))
    for r in ordered:
        i = r.outbox_id
        copies[i] += 1
        if i in first:
            continue
        first[i] = r
        w = outbox.written.get(i)
        if w is None or (w.msg.topic, w.msg.key, w.msg.value) != (r.topic, r.key, r.value):
            corrupt.append(i)
    lost = sorted(expected - set(first))
    unexpected = sorted(set(first) - expected)
    violations, worst, split, by_topic = _order(outbox, first)
    dup_topics: Counter[str] = Counter()
    for i, n in copies.items():
        if n > 1:
            dup_topics[first[i].topic] += n - 1
    return Verdict(
        written=len(outbox.written), expected=len(expected),
        delivered=len(set(first) & expected), duplicates=sum(copies.values()) - len(copies),
        lost=lost, unexpected=unexpected, corrupt=corrupt, copies=copies,
        order_violations=violations, worst_key_violations=worst, keys_split=split,
        violations_by_topic=by_topic, duplicates_by_topic=dup_topics,
    )


def _order(outbox: Outbox, first: dict[int, Record]) -> tuple[int, int, int, Counter[str]]:
    groups: dict[tuple[str, bytes], list[int]] = defaultdict(list)
    for i in first:
        w = outbox.written.get(i)
        if w is not None and w.msg.ordering_key is not None:
            groups[(w.msg.topic, w.msg.ordering_key)].append(i)
    total = worst = split = 0
    by_topic: Counter[str] = Counter()
    for (topic, _), ids in groups.items():
        if len({first[i].partition for i in ids}) > 1:
            split += 1
            continue
        pos = {i: first[i].offset for i in ids}
        bad = _violations(outbox, ids, pos)
        total += bad
        worst = max(worst, bad)
        if bad:
            by_topic[topic] += bad
    return total, worst, split, by_topic


def _violations(outbox: Outbox, ids: list[int], pos: dict[int, int]) -> int:
    """Messages of one key whose first appearance precedes one that must come earlier."""
    txs = outbox.transactions

    def commit(i: int) -> int:
        seq = txs[outbox.written[i].tx].commit_seq
        return seq if seq is not None else 2**62  # never committed: orders nothing

    by_commit = sorted(ids, key=commit)
    commits = [commit(i) for i in by_commit]
    prefix_max: list[int] = []
    best = -1
    for i in by_commit:
        best = max(best, pos[i])
        prefix_max.append(best)
    bad = 0
    in_tx_max: dict[int, int] = {}
    for i in sorted(ids):
        w = outbox.written[i]
        tx = txs[w.tx]
        # Transactions that committed before this one began.
        n = bisect.bisect_left(commits, tx.begin_seq)
        before = prefix_max[n - 1] if n else -1
        earlier_in_tx = in_tx_max.get(w.tx, -1)
        if before > pos[i] or earlier_in_tx > pos[i]:
            bad += 1
        in_tx_max[w.tx] = max(earlier_in_tx, pos[i])
    return bad


# --------------------------------------------------------------------------- processes

def relay_config(url: str, bootstrap: str, workdir: Path, *, topics: Sequence[str] | None = None,
                 source_name: str = "fault-relay", **sections: dict[str, Any]) -> Config:
    """A profile with short, test-sized timeouts; keyword sections override the defaults."""
    data: dict[str, Any] = {
        "postgres": {"url": url, "sslmode": "disable", "connect_timeout_s": 5},
        "kafka": {"bootstrap_servers": bootstrap, "delivery_timeout_ms": 20_000,
                  "request_timeout_ms": 10_000, "admin_timeout_s": 5},
        "ledger": {"path": str(workdir / "ledger"), "flush_interval_s": 2},
        "relay": {
            "source_name": source_name,
            "checkpoint_path": str(workdir / "checkpoint"),
            "poll_interval_s": 0.1,
            "lock_timeout_s": 5,
            "heartbeat_interval_s": 1,
            "backoff_base_s": 0.5,
            "backoff_max_s": 4,
            "available_now_deadline_s": 60,
            "include_topics": [_literal(t) for t in topics] if topics else [".*"],
        },
        "spark": {"shuffle_partitions": 2},
    }
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return build_config(data, env={})


def _literal(topic: str) -> str:
    import re

    return re.escape(topic)


def with_relay(config: Config, **values: Any) -> Config:
    return config.model_copy(update={"relay": config.relay.model_copy(update=values)})


class RelayProc:
    """`spark-submit jobs/relay.py` as its own process group, with its output in a file."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> int:
        """SIGKILL the whole group (the JVM, the Python driver and its workers)."""
        self.signal(signal.SIGKILL)
        code = self.proc.wait(timeout=60)
        wait_until(lambda: not _group_alive(self.proc.pid), 60, f"group of {self.name} to die")
        return code

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"relay {self.name} still running after {timeout_s:.0f} s\n{self.tail()}"
            ) from None

    def stop(self, timeout_s: float = 180) -> int:
        """Graceful stop (SIGTERM to the group); SIGKILL if it hangs."""
        if not self.alive():
            return int(self.proc.returncode)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"relay {self.name} ignored SIGTERM\n{self.tail()}") from None

    def text(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 40) -> str:
        kept = [ln for ln in self.text().splitlines() if ln.strip() and "[Stage" not in ln]
        return f"--- {self.name} (last {lines} lines) ---\n" + "\n".join(kept[-lines:])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies of the group (reaped by init later) count as gone.
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def start_relay(config: Config, workdir: Path, name: str, *, available_now: bool = False,
                env: dict[str, str] | None = None, submit_args: Sequence[str] = (),
                cwd: Path = REPO) -> RelayProc:
    """Start a relay with `spark-submit jobs/relay.py`, as production does (README,
    "Running it"; the jars come from spark-defaults.conf), in a new process group.
    `submit_args` are spark-submit's own (e.g. `--master`); `cwd` is the driver's."""
    workdir.mkdir(parents=True, exist_ok=True)
    profile = write_profile(config, workdir / f"{name}.toml")
    submit = Path(sys.executable).parent / "spark-submit"
    assert submit.exists(), "spark-submit is installed with pyspark"
    child_env = {k: v for k, v in os.environ.items() if k not in _RELAY_ENV}
    child_env.update({"PYSPARK_PYTHON": sys.executable, **(env or {})})
    log = workdir / f"{name}.log"
    args = [str(submit), *submit_args, str(REPO / "jobs" / "relay.py"), "--config", str(profile)]
    if available_now:
        args.append("--available-now")
    with log.open("ab") as out:
        proc = subprocess.Popen(args, cwd=cwd, env=child_env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return RelayProc(name, proc, log)


@contextlib.contextmanager
def relays() -> Iterator[list[RelayProc]]:
    """Every relay started in the block is killed at its end, whatever happened."""
    started: list[RelayProc] = []
    try:
        yield started
    finally:
        for r in started:
            if r.alive() or _group_alive(r.pid):
                with contextlib.suppress(Exception):
                    r.kill()


def tokens_of(url: str, source_name: str) -> set[str]:
    """Fencing tokens of a source's processes seen so far (tokens start with the source
    name); a drain lane's token counts as its process's."""
    rows = query(url, "SELECT DISTINCT token FROM fault_fence_events WHERE token LIKE %s "
                 "UNION SELECT DISTINCT new_owner FROM fault_lock_events WHERE new_owner LIKE %s",
                 (source_name + "@%", source_name + "@%"))
    return {t.removesuffix(DRAIN_SUFFIX) for (t,) in rows if t}


def lane_tokens(token: str) -> list[str]:
    """The tokens one process claims under: its own and its drain lane's."""
    return [token, token + DRAIN_SUFFIX]


def sources_connected(url: str) -> int:
    """How many relays have their streaming source polling this database."""
    return int(scalar(url, "SELECT count(*) FROM pg_stat_activity "
                      "WHERE datname = current_database() "
                      "AND application_name = 'outbox-relay-source'"))


# --------------------------------------------------------------------------- ledger

def ledger_entries(spark: Any, config: Config) -> list[tuple[str, int, str]]:
    """Copy what is still staged to Delta, then every ledger row as (topic, id, outcome)."""
    from relay.ledger.delta import Ledger

    db = Database(config.postgres, "fault-ledger-check")
    try:
        ledger = Ledger(spark, config, db)
        ledger.flush()
        if not ledger.exists():
            return []
        rows = ledger.table().select("topic", "message_id", "outcome").collect()
        return [(r.topic, int(r.message_id), str(r.outcome)) for r in rows]
    finally:
        db.close()


def high_watermarks(bootstrap: str, topics: Sequence[str],
                    conf: Mapping[str, str] | None = None) -> dict[tuple[str, int], int]:
    """The current end offset of every partition of `topics`: the log's end, records of
    open transactions included (a read_committed consumer is told the stable offset).
    A topic the broker does not know fails the test: reading it would find nothing."""
    consumer = Consumer({**(conf or {}), "bootstrap.servers": bootstrap,
                         "group.id": unique("fault-marks"),
                         "isolation.level": "read_uncommitted"})
    try:
        metadata = consumer.list_topics(timeout=30)
        marks = {}
        for topic in topics:
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None:
                raise AssertionError(f"verification consumer: topic {topic}: "
                                     f"{meta.error if meta else 'not in metadata'}")
            for p in meta.partitions:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                marks[(topic, p)] = high
        return marks
    finally:
        consumer.close()


def quiesce(url: str, quiet_s: float = 2.0, timeout_s: float = 300) -> None:
    """Wait until no relay works on this outbox: no session, no lock, no lock change for
    `quiet_s`; topics waiting in backoff are put off for an hour first, so that no batch
    starts. A group SIGTERM that lands while Spark writes a checkpoint file kills Hadoop's
    `chmod` helper and fails the query (see test_signals.py); the scenarios here test
    their own fault, so they stop relays only when idle."""
    query(url, "UPDATE kafka_topic_info SET next_retry_at = now() AT TIME ZONE 'UTC' "
          "+ interval '1 hour' WHERE error")

    def idle() -> bool:
        return bool(scalar(url, """
            SELECT NOT EXISTS (SELECT 1 FROM relay_sessions)
               AND NOT EXISTS (SELECT 1 FROM kafka_topic_info WHERE locked_by IS NOT NULL)
               AND coalesce((SELECT max(at) FROM fault_lock_events), '-infinity')
                   < now() AT TIME ZONE 'UTC' - make_interval(secs => %s)
        """, (quiet_s,)))

    wait_until(idle, timeout_s, "the relays to be idle", interval_s=0.5)
