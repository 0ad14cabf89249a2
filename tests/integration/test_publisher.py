"""The application-side publisher on the real stack: what it writes is what the relay
sends and a consumer receives, through every supported connection type; what it refuses
leaves kafka_messages untouched."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg2
import psycopg2.extras
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, scoped_session, sessionmaker
from sqlalchemy.pool import NullPool

import outbox_relay
from outbox_relay import Message
from outbox_relay.errors import (
    DatabaseError,
    DatabaseUnavailableError,
    InvalidMessageError,
    NoTransactionError,
)
from outbox_relay.outbox.publisher import PAGE_ROWS
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import consume, create_topics, query, unique
from tests.integration.wire_count import WireCounter

pytestmark = pytest.mark.integration

ADAPTERS = ["psycopg2", "psycopg", "sqlalchemy-session", "sqlalchemy-connection"]
PREFIX = "outbox-relay."  # the relay's default, which make_config keeps


def _engine(url: str, driver: str) -> sa.Engine:
    return sa.create_engine(url.replace("postgresql://", f"postgresql+{driver}://", 1),
                            poolclass=NullPool)


@contextmanager
def transaction(adapter: str, url: str, commit: bool = True) -> Iterator[Any]:
    """A connection object of `adapter` inside a transaction, committed or rolled back at
    the end. The SQLAlchemy Session runs on psycopg2, the Connection on psycopg 3."""
    if adapter in ("psycopg2", "psycopg"):
        conn = psycopg2.connect(url) if adapter == "psycopg2" else psycopg.connect(url)
        try:
            yield conn
            conn.commit() if commit else conn.rollback()
        finally:
            conn.close()
    else:
        engine = (_engine(url, "psycopg2") if adapter == "sqlalchemy-session"
                  else _engine(url, "psycopg"))
        target = Session(engine) if adapter == "sqlalchemy-session" else engine.connect()
        try:
            target.begin()
            yield target
            target.commit() if commit else target.rollback()
        finally:
            target.close()
            engine.dispose()


def count(url: str) -> int:
    return int(query(url, "SELECT count(*) FROM kafka_messages")[0][0])


def key_shapes(topic: str, tag: str) -> list[Message]:
    """Every key shape, with headers of every kind the relay accepts."""
    return [
        Message(topic, f"{tag}:0", key=None),  # no key: the producer picks the partition
        Message(topic, f"{tag}:1".encode(), key=b"k1", headers={"trace": "a"}),
        Message(topic, f"{tag}:2", key="k1", partition_key="k1"),  # partition_key = key
        Message(topic, f"{tag}:3", key="k1", partition_key="group-7",
                headers={"h\"q\\": "line\nbreak", "emoji": "\U0001f600", "x-outbox-relay.id": "1"}),
        Message(topic, None, key=bytes([0, 255, 128, 10])),  # binary key, tombstone
        Message(topic, b"", key=None, partition_key="group-7", headers={}),  # empty value
        Message(topic, f"{tag}:6", key="ключ", headers={"": ""}),
    ]


def test_committed_messages_are_relayed_with_their_headers_and_rolled_back_ones_are_not(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    topic = unique("publisher")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    sent: dict[int, Message] = {}
    for adapter in ADAPTERS:
        messages = key_shapes(topic, adapter)
        with transaction(adapter, migrated_url) as conn:
            first = messages[0]
            ids = [outbox_relay.publish(conn, first.topic, first.value, key=first.key)]
            ids += outbox_relay.publish_many(conn, messages[1:])
        sent.update(zip(ids, messages, strict=True))
        with transaction(adapter, migrated_url, commit=False) as conn:
            outbox_relay.publish_many(conn, key_shapes(topic, f"rolled-back-{adapter}"))
    assert count(migrated_url) == len(sent)

    result = run_relay(make_config([topic]))

    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, [topic], expect=len(sent))
    assert sorted(r.outbox_id for r in got) == sorted(sent), "lost, duplicated or rolled back"
    partitions: dict[bytes, set[int]] = defaultdict(set)
    for r in got:
        m = sent[r.outbox_id]
        assert r.value == (m.value.encode() if isinstance(m.value, str) else m.value)
        assert r.key == (m.key.encode() if isinstance(m.key, str) else m.key)
        user = {k: v.decode() for k, v in r.headers.items() if not k.startswith(PREFIX)}
        assert user == dict(m.headers or {}), f"headers of message {r.outbox_id}"
        assert r.headers[PREFIX + "id"] == str(r.outbox_id).encode()
        ordering = m.partition_key.encode() if m.partition_key is not None else m.key
        if isinstance(ordering, str):
            ordering = ordering.encode()
        if ordering is not None:
            partitions[ordering].add(r.partition)
    assert all(len(p) == 1 for p in partitions.values()), f"a key in two partitions: {partitions}"
    assert count(migrated_url) == 0


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_ids_come_back_in_input_order_and_a_rollback_leaves_nothing(
    migrated_url: str, adapter: str,
) -> None:
    messages = [Message("orders", f"v{i}", key=f"k{i % 3}") for i in range(PAGE_ROWS + 5)]
    with transaction(adapter, migrated_url, commit=False) as conn:
        ids = outbox_relay.publish_many(conn, messages)
        assert len(ids) == len(messages)
        with_values = _rows_seen_by(conn, ids)
        assert with_values == [m.value for m in messages], "ids out of input order"
    assert count(migrated_url) == 0, "a rolled-back transaction published"


def _rows_seen_by(conn: Any, ids: list[int]) -> list[str]:
    """The values of `ids`, in the order of `ids`, read inside the caller's transaction."""
    sql = ("SELECT convert_from(message, 'UTF8') FROM unnest(%(ids)s::bigint[]) "
           "WITH ORDINALITY AS u(id, n) JOIN kafka_messages USING (id) ORDER BY n")
    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, sa.Connection):
        return [r[0] for r in conn.exec_driver_sql(sql, {"ids": ids})]
    with conn.cursor() as cur:
        cur.execute(sql, {"ids": ids})
        return [r[0] for r in cur.fetchall()]


BAD: list[tuple[str, Callable[[Any], object], type[Exception], str]] = [
    ("illegal topic", lambda c: outbox_relay.publish(c, "orders/eu", b"v"),
     InvalidMessageError, "topic name 'orders/eu' is illegal"),
    ("topic with a trailing newline", lambda c: outbox_relay.publish(c, "orders\n", b"v"),
     InvalidMessageError, "is illegal"),
    ("reserved header",
     lambda c: outbox_relay.publish(c, "orders", b"v", headers={PREFIX + "id": "7"}),
     InvalidMessageError, "uses the reserved prefix outbox-relay."),
    ("custom reserved prefix", lambda c: outbox_relay.publish(
        c, "orders", b"v", headers={"acme.id": "7"}, header_prefix="acme."),
     InvalidMessageError, "uses the reserved prefix acme."),
    ("header value not a str", lambda c: outbox_relay.publish(c, "orders", b"v", headers={"n": 1}),
     InvalidMessageError, "header values must be strings: 'n' is int"),
    ("nested header value",
     lambda c: outbox_relay.publish(c, "orders", b"v", headers={"n": {"a": "b"}}),
     InvalidMessageError, "header values must be strings"),
    ("headers not a mapping",
     lambda c: outbox_relay.publish(c, "orders", b"v", headers=[("a", "b")]),
     InvalidMessageError, "headers must be a mapping"),
    ("NUL in a header", lambda c: outbox_relay.publish(c, "orders", b"v", headers={"a": "x\x00"}),
     InvalidMessageError, "NUL"),
    ("value of another type", lambda c: outbox_relay.publish(c, "orders", 42),
     InvalidMessageError, "value must be bytes, str or None, not int"),
    ("key of another type", lambda c: outbox_relay.publish(c, "orders", b"v", key=7),
     InvalidMessageError, "key must be bytes, str or None, not int"),
    ("partition_key bytes", lambda c: outbox_relay.publish(c, "orders", b"v", partition_key=b"p"),
     InvalidMessageError, "partition_key must be str or None, not bytes"),
    ("too big by default", lambda c: outbox_relay.publish(c, "orders", b"x" * 1_048_576),
     InvalidMessageError, "over the limit of"),
    ("too big for the caller's limit", lambda c: outbox_relay.publish(
        c, "orders", "é" * 50, key=b"k", max_bytes=100),
     InvalidMessageError, "message is 101 bytes, over the limit of 100"),
    ("one bad message among good ones", lambda c: outbox_relay.publish_many(
        c, [Message("orders", b"ok"), Message("orders", b"ok"), Message("or ders", b"bad")]),
     InvalidMessageError, "message 2: topic name 'or ders' is illegal"),
    ("not a Message",
     lambda c: outbox_relay.publish_many(c, [Message("orders", b"ok"), ("t", b"v")]),
     InvalidMessageError, "message 1: must be a outbox_relay.Message, not tuple"),
]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_bad_input_is_refused_and_writes_nothing(migrated_url: str, adapter: str) -> None:
    # The caller catches the error and commits: the refusal itself must have written nothing.
    for name, call, error, words in BAD:
        with transaction(adapter, migrated_url) as conn:
            with pytest.raises(error) as caught:
                call(conn)
            assert words in str(caught.value), f"{name}: {caught.value}"
        assert count(migrated_url) == 0, f"{name} wrote a row"


def test_outside_a_transaction_it_refuses_unless_told_otherwise(migrated_url: str) -> None:
    pg2 = psycopg2.connect(migrated_url)
    pg2.autocommit = True
    pg3 = psycopg.connect(migrated_url, autocommit=True)
    autocommit_engine = _engine(migrated_url, "psycopg2").execution_options(
        isolation_level="AUTOCOMMIT")
    engine = _engine(migrated_url, "psycopg")
    try:
        with autocommit_engine.connect() as sa_auto, engine.connect() as sa_idle:
            sa_auto.begin()  # a no-op under AUTOCOMMIT: the DBAPI connection commits each row
            for conn in (pg2, pg3, sa_auto, sa_idle):
                with pytest.raises(NoTransactionError, match="outside a transaction"):
                    outbox_relay.publish(conn, "orders", b"v")
            assert count(migrated_url) == 0
            for conn in (pg2, pg3, sa_auto):  # committed at once: another session sees them
                outbox_relay.publish(conn, "orders", b"v", allow_autocommit=True)
            assert count(migrated_url) == 3
            outbox_relay.publish(sa_idle, "orders", b"v", allow_autocommit=True)
            assert sa_idle.in_transaction(), "SQLAlchemy began a transaction for it"
            sa_idle.commit()
            assert count(migrated_url) == 4
        with pg3.transaction():  # psycopg's explicit transaction on an autocommit connection
            outbox_relay.publish(pg3, "orders", b"v")
        pg2.cursor().execute("BEGIN")  # an explicit one on an autocommit psycopg2 connection
        outbox_relay.publish(pg2, "orders", b"v")
        pg2.cursor().execute("ROLLBACK")
        assert count(migrated_url) == 5
    finally:
        pg2.close()
        pg3.close()
        autocommit_engine.dispose()
        engine.dispose()


@pytest.mark.parametrize("adapter", ["psycopg2", "psycopg", "sqlalchemy-session"])
def test_publish_many_takes_one_round_trip_per_page(migrated_url: str, adapter: str) -> None:
    """10,000 messages cost one round trip per page of PAGE_ROWS rows, not one per row.

    Round trips are counted on the wire, by a proxy between the driver and PostgreSQL
    (tests/integration/wire_count.py): each Query or Sync message is one request the
    driver waits on, whatever the driver does underneath: a BEGIN the driver still owes,
    or psycopg 3 preparing a statement on its fifth run, is the +1. A counter on
    `execute` would trust the driver not to split a call, and the server's statistics
    count transactions or rows, not requests.
    """
    proxy = WireCounter(migrated_url)
    n = 10_000
    messages = [Message("bulk", f"v{i}", key=f"k{i % 50}", headers={"i": str(i)})
                for i in range(n)]
    try:
        with transaction(adapter, proxy.url) as conn:
            # The application's own statement first: SQLAlchemy connects lazily, and its
            # dialect's first-connect queries are no part of the publish.
            _rows_seen_by(conn, [])
            before = proxy.requests
            ids = outbox_relay.publish_many(conn, messages)
            trips = proxy.requests - before
    finally:
        proxy.close()
    pages = -(-n // PAGE_ROWS)
    assert pages <= trips <= n / 2000 + 1, f"{trips} round trips for {n} rows"
    assert ids == sorted(ids) and len(set(ids)) == n
    stored = query(migrated_url, "SELECT id, convert_from(message, 'UTF8'), headers->>'i' "
                   "FROM kafka_messages ORDER BY id")
    assert [(i, f"v{k}", str(k)) for k, i in enumerate(ids)] == stored


class _AppConnection(psycopg2.extensions.connection):
    """A connection class of the application's own, as connection_factory makes."""


def test_connection_variants_applications_use(migrated_url: str) -> None:
    """Row and cursor factories, a connection subclass, a scoped_session; a closed
    connection gets the project's error, not the driver's."""
    pg2 = psycopg2.connect(migrated_url, connection_factory=_AppConnection,
                           cursor_factory=psycopg2.extras.RealDictCursor)
    pg3 = psycopg.connect(migrated_url, row_factory=psycopg.rows.dict_row)
    engine = _engine(migrated_url, "psycopg2")
    scoped = scoped_session(sessionmaker(engine))
    try:
        assert outbox_relay.publish_many(pg2, [Message("orders", b"a")] * 2) == [1, 2]
        pg2.commit()
        assert outbox_relay.publish(pg3, "orders", b"b") == 3
        pg3.commit()
        scoped.begin()
        assert outbox_relay.publish(scoped, "orders", b"c") == 4
        scoped.commit()
        assert count(migrated_url) == 4
    finally:
        scoped.remove()
        engine.dispose()
        pg2.close()
        pg3.close()
    for closed in (pg2, pg3):
        with pytest.raises(DatabaseUnavailableError, match="the connection is closed"):
            outbox_relay.publish(closed, "orders", b"v")


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_driver_error_becomes_the_projects_own(database_url: str, adapter: str) -> None:
    """A database without the outbox's schema: the driver's error arrives as a
    DatabaseError naming PostgreSQL's reason, with the driver's as its cause."""
    missing = 'relation "kafka_messages" does not exist'
    with (pytest.raises(DatabaseError, match=missing) as caught,
          transaction(adapter, database_url, commit=False) as conn):
        outbox_relay.publish(conn, "orders", b"v")
    assert not isinstance(caught.value, DatabaseUnavailableError)
    assert caught.value.__cause__ is not None
