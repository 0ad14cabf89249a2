"""An outbox writer that remembers what it wrote: every message with its transaction's
commit order, so the oracle knows which transactions were serialised."""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from tests.faults.infra import scalar
from tests.integration.helpers import partitioning_bytes


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
    order checks know which transactions were serialised (docs/design.md,
    invariant 2, per-key order).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.written: dict[int, Written] = {}
        self.transactions: list[Tx] = []
        self._clock = 0
        self._conn: psycopg2.extensions.connection | None = None
        # A connection carries one transaction at a time: a test's own writes and a
        # Trickle's through the same Outbox take turns, a transaction each.
        self._writing = threading.Lock()

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
        for msgs in transactions:
            with self._writing:
                conn = self._connection()
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


@dataclass
class Refill:
    """Another backlog of `n` in one transaction, each time the outbox holds no row of
    `topics` (a trickle may go on in others).

    A scenario that must catch a relay mid-session can lose that race: the relays may keep
    up with a writer of 50 rows a transaction, every claim small and sent in milliseconds
    by the driver's producer, and drain it all before a session is seen (clean-clone CI
    runs waited 600 s for one). A backlog in one transaction is claimed in full claims,
    each a Spark write long enough to be caught. `count` says how many were written."""

    outbox: Outbox
    topics: Sequence[str]
    n: int
    seed: int
    count: int = 0

    def __call__(self) -> None:
        if not scalar(self.outbox.url, "SELECT count(*) FROM kafka_messages "
                      "WHERE topic = ANY(%s)", (list(self.topics),)):
            self.count += 1
            self.outbox.write(traffic(self.topics, self.n, per_tx=self.n, keys=20,
                                      value_bytes=900, seed=self.seed + self.count,
                                      tag=f"refill{self.count}-"))
