"""The async publisher on the real stack, through each async driver: what it writes in a
committed transaction is what the relay sends and a consumer receives; a rollback, a
refusal or a bad message leaves kafka_messages untouched; pages are statements on the
wire; a driver's error arrives as the project's own. Async code runs under asyncio.run in
plain tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg
import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.pool import NullPool

import outbox_relay
from outbox_relay import Message
from outbox_relay.errors import (
    DatabaseError,
    DatabaseUnavailableError,
    InvalidMessageError,
    NoTransactionError,
)
from outbox_relay.outbox.statement import PAGE_ROWS
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import consume, create_topics, query, unique
from tests.integration.test_publisher import PREFIX, count, key_shapes
from tests.integration.wire_count import WireCounter

pytestmark = pytest.mark.integration

# The SQLAlchemy AsyncConnection runs on asyncpg, the AsyncSession on psycopg 3.
DRIVERS = ["psycopg", "asyncpg", "sqlalchemy-connection", "sqlalchemy-session"]

T = TypeVar("T")


def run(coro: Callable[[], Awaitable[T]]) -> T:
    """Runs the test's async part; a hang fails the test instead of blocking the suite."""
    async def main() -> T:
        return await asyncio.wait_for(coro(), 120)
    return asyncio.run(main())


def _engine(url: str, driver: str) -> AsyncEngine:
    url = url.replace("postgresql://", f"postgresql+{driver}://", 1)
    if driver == "asyncpg":  # SQLAlchemy passes the query on as asyncpg's keywords
        url = url.replace("sslmode=", "ssl=")
    return create_async_engine(url, poolclass=NullPool)


@asynccontextmanager
async def transaction(driver: str, url: str, commit: bool = True) -> AsyncIterator[Any]:
    """A connection object of `driver` inside a transaction, committed or rolled back at
    the end (an exception leaves it uncommitted: the connection closes)."""
    if driver == "psycopg":
        pg = await psycopg.AsyncConnection.connect(url)
        try:
            yield pg
            await (pg.commit() if commit else pg.rollback())
        finally:
            await pg.close()
    elif driver == "asyncpg":
        apg = await asyncpg.connect(url)
        try:
            tx = apg.transaction()
            await tx.start()
            yield apg
            await (tx.commit() if commit else tx.rollback())
        finally:
            await apg.close()
    else:
        session = driver == "sqlalchemy-session"
        engine = _engine(url, "psycopg" if session else "asyncpg")
        target = AsyncSession(engine) if session else await engine.connect()
        try:
            await target.begin()
            yield target
            await (target.commit() if commit else target.rollback())
        finally:
            await target.close()
            await engine.dispose()


async def app_query(conn: Any, sql: str) -> list[Any]:
    """The application's own statement (no parameters) on `conn`, in its transaction."""
    if isinstance(conn, psycopg.AsyncConnection):
        async with conn.cursor() as cur:
            await cur.execute(sql)
            return list(await cur.fetchall())
    if isinstance(conn, asyncpg.Connection):
        return list(await conn.fetch(sql))
    target = await conn.connection() if isinstance(conn, AsyncSession) else conn
    return list(await target.exec_driver_sql(sql))


def test_committed_messages_are_relayed_and_rolled_back_ones_are_not(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    topic = unique("publisher-async")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    sent: dict[int, Message] = {}

    async def publish_all() -> None:
        for driver in DRIVERS:
            messages = key_shapes(topic, driver)
            async with transaction(driver, migrated_url) as conn:
                first = messages[0]
                ids = [await outbox_relay.publish_async(conn, first.topic, first.value,
                                                        key=first.key)]
                ids += await outbox_relay.publish_many_async(conn, messages[1:])
            sent.update(zip(ids, messages, strict=True))
            async with transaction(driver, migrated_url, commit=False) as conn:
                await outbox_relay.publish_many_async(
                    conn, key_shapes(topic, f"rolled-back-{driver}"))

    run(publish_all)
    assert count(migrated_url) == len(sent) == 7 * len(DRIVERS)

    result = run_relay(make_config([topic]))

    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, [topic], expect=len(sent))
    assert sorted(r.outbox_id for r in got) == sorted(sent), "lost, duplicated or rolled back"
    partitions: dict[bytes, set[int]] = {}
    for r in got:
        m = sent[r.outbox_id]
        assert r.value == (m.value.encode() if isinstance(m.value, str) else m.value)
        assert r.key == (m.key.encode() if isinstance(m.key, str) else m.key)
        user = {k: v.decode() for k, v in r.headers.items() if not k.startswith(PREFIX)}
        assert user == dict(m.headers or {}), f"headers of message {r.outbox_id}"
        ordering = m.partition_key if m.partition_key is not None else m.key
        if ordering is not None:
            as_bytes = ordering.encode() if isinstance(ordering, str) else ordering
            partitions.setdefault(as_bytes, set()).add(r.partition)
    assert bytes([0, 255, 128, 10]) in partitions, "the binary key was not sent"
    assert all(len(p) == 1 for p in partitions.values()), f"a key in two partitions: {partitions}"
    assert count(migrated_url) == 0


def test_outside_a_transaction_it_refuses_unless_told_otherwise(migrated_url: str) -> None:
    async def refuse_then_allow(conn: Any) -> None:
        with pytest.raises(NoTransactionError, match="outside a transaction"):
            await outbox_relay.publish_async(conn, "orders", b"v")
        with pytest.raises(NoTransactionError, match="outside a transaction"):
            await outbox_relay.publish_many_async(conn, [Message("orders", b"v")])
        await outbox_relay.publish_async(conn, "orders", b"v", allow_autocommit=True)

    async def scenario() -> list[int]:
        counts = []
        pg = await psycopg.AsyncConnection.connect(migrated_url, autocommit=True)
        apg = await asyncpg.connect(migrated_url)
        on_asyncpg, on_psycopg = _engine(migrated_url, "asyncpg"), _engine(migrated_url, "psycopg")
        autocommit = on_psycopg.execution_options(isolation_level="AUTOCOMMIT")
        try:
            for conn in (pg, apg):  # each row commits at once: another session sees it
                await refuse_then_allow(conn)
                counts.append(count(migrated_url))
            async with autocommit.connect() as sa_auto:
                await sa_auto.begin()  # a no-op under AUTOCOMMIT
                await refuse_then_allow(sa_auto)
                counts.append(count(migrated_url))
            async with on_asyncpg.connect() as sa_idle, AsyncSession(on_psycopg) as session:
                for target in (sa_idle, session):  # SQLAlchemy begins one for the opt-out
                    await refuse_then_allow(target)
                    assert target.in_transaction()
                    await target.commit()
                    counts.append(count(migrated_url))
            async with pg.transaction():  # psycopg's explicit transaction, on autocommit
                await outbox_relay.publish_async(pg, "orders", b"v")
            async with apg.transaction():
                await outbox_relay.publish_async(apg, "orders", b"v")
            counts.append(count(migrated_url))
            async with asyncpg.create_pool(migrated_url, min_size=1, max_size=1) as pool, \
                    pool.acquire() as pooled:  # a pool's proxy of a Connection
                with pytest.raises(NoTransactionError, match="no transaction started"):
                    await outbox_relay.publish_async(pooled, "orders", b"v")
                async with pooled.transaction():
                    await outbox_relay.publish_async(pooled, "orders", b"v")
            counts.append(count(migrated_url))
        finally:
            await pg.close()
            await apg.close()
            await on_asyncpg.dispose()
            await on_psycopg.dispose()
        return counts

    assert run(scenario) == [1, 2, 3, 4, 5, 7, 8]


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_bad_message_writes_none_and_a_page_boundary_is_two_statements(
    migrated_url: str, driver: str,
) -> None:
    """One bad message among good ones writes nothing, even when the caller commits; then
    PAGE_ROWS + 1 messages go as two statements, counted on the wire (wire_count.py: each
    Sync or Query is a round trip), with their ids in input order."""
    proxy = WireCounter(migrated_url)
    n = PAGE_ROWS + 1
    messages = [Message("bulk", f"v{i}", key=f"k{i % 7}") for i in range(n)]

    async def scenario() -> tuple[int, list[int]]:
        async with transaction(driver, proxy.url) as conn:
            with pytest.raises(InvalidMessageError, match="message 2: topic name 'or ders'"):
                await outbox_relay.publish_many_async(
                    conn, [Message("orders", b"ok"), Message("orders", b"ok"),
                           Message("or ders", b"bad")])
            with pytest.raises(InvalidMessageError, match="reserved prefix"):
                await outbox_relay.publish_async(conn, "orders", b"v", headers={PREFIX + "id": "1"})
            assert await app_query(conn, "SELECT count(*) FROM kafka_messages") == [(0,)]
            # Once before counting: a driver's first run of a statement may prepare it
            # (asyncpg and SQLAlchemy's asyncpg adapter do), which is no part of paging.
            await outbox_relay.publish_async(conn, "warm", b"up")
            before = proxy.requests
            ids = await outbox_relay.publish_many_async(conn, messages)
            return proxy.requests - before, ids

    try:
        trips, ids = run(scenario)
    finally:
        proxy.close()
    assert trips == 2, f"{trips} round trips for {n} rows, {PAGE_ROWS} a page"
    stored = query(migrated_url, "SELECT id, convert_from(message, 'UTF8') FROM kafka_messages "
                   "WHERE topic = 'bulk' ORDER BY id")
    assert stored == [(i, f"v{k}") for k, i in enumerate(ids)], "ids out of input order"
    assert count(migrated_url) == n + 1, "the bad messages wrote rows"


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_driver_error_becomes_the_projects_own(database_url: str, driver: str) -> None:
    """A database without the outbox's schema: DatabaseError naming PostgreSQL's reason;
    a connection the server terminated: DatabaseUnavailableError. The driver's error is
    the cause of each."""
    async def scenario() -> tuple[BaseException, BaseException]:
        with pytest.raises(DatabaseError) as missing:
            async with transaction(driver, database_url, commit=False) as conn:
                await outbox_relay.publish_async(conn, "orders", b"v")
        with pytest.raises(DatabaseUnavailableError) as lost:
            async with transaction(driver, database_url, commit=False) as conn:
                [(pid,)] = await app_query(conn, "SELECT pg_backend_pid()")
                query(database_url, "SELECT pg_terminate_backend(%s)", (pid,))
                await outbox_relay.publish_many_async(conn, [Message("orders", b"v")])
        return missing.value, lost.value

    missing, lost = run(scenario)
    assert 'relation "kafka_messages" does not exist' in str(missing)
    assert not isinstance(missing, DatabaseUnavailableError)
    assert "cannot publish to the outbox" in str(lost)
    assert missing.__cause__ is not None and lost.__cause__ is not None
