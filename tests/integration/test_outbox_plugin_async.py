"""The `outbox` fixture's async assertions in an application's own pytest run (pytester,
a fresh migrated database; see tests/integration/test_outbox_plugin.py): psycopg's
AsyncConnection, asyncpg (a connection and a pool's), SQLAlchemy's AsyncConnection and
AsyncSession. The application's tests run their coroutines with asyncio.run.
"""

from __future__ import annotations

import psycopg2
import pytest

pytestmark = pytest.mark.integration
pytest_plugins = ["pytester"]

ASYNC_APP = '''
import asyncio
import os

import asyncpg
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

URL = os.environ["DATABASE_URL"]
# The application's own rows, written as any writer of kafka_messages writes them.
INSERT = "INSERT INTO kafka_messages (topic, message, key) VALUES ('orders.created', {}, {})"


def test_psycopg_async(outbox):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(URL) as conn:
            await conn.execute(INSERT.format("%s", "%s"), (b"p1", b"order-1"))
            [m] = await outbox.assert_published_async(conn, "orders.created", key="order-1")
            assert m.value == b"p1"
            with pytest.raises(TypeError, match="async connection"):
                outbox.published(conn)
            await conn.rollback()
            await outbox.assert_nothing_published_async(conn)

    asyncio.run(scenario())


def test_asyncpg_and_its_pool(outbox):
    async def scenario():
        conn = await asyncpg.connect(URL)
        await conn.execute(INSERT.format("'from before'::bytea", "NULL"))  # committed
        async with conn.transaction():
            await outbox.assert_nothing_published_async(conn)
            await conn.execute(INSERT.format("$1::bytea", "$2::bytea"), b"a1", b"order-2")
            await outbox.assert_published_async(conn, value="a1", key=b"order-2", count=1)
        await conn.close()
        async with asyncpg.create_pool(URL, min_size=1, max_size=1) as pool:
            async with pool.acquire() as pooled, pooled.transaction():
                await pooled.execute(INSERT.format("'pooled'::bytea", "NULL"))
                assert [m.value for m in await outbox.published_async(pooled)] == [b"pooled"]

    asyncio.run(scenario())


def test_sqlalchemy_async(outbox):
    async def scenario():
        engine = create_async_engine(URL.replace("postgresql://", "postgresql+asyncpg://"))
        async with engine.connect() as conn, conn.begin() as tx:
            await conn.execute(text(INSERT.format("'s1'::bytea", "'order-3'::bytea")))
            await outbox.assert_published_async(conn, "orders.created", key="order-3")
            await tx.rollback()
        async with AsyncSession(engine) as session, session.begin():
            await session.execute(text(INSERT.format("'s2'::bytea", "'order-4'::bytea")))
            await outbox.assert_published_async(session, value=b"s2", key="order-9")
        await engine.dispose()

    asyncio.run(scenario())
'''


@pytest.fixture
def app_database(migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    conn = psycopg2.connect(migrated_url)
    with conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric)")
    conn.close()
    monkeypatch.setenv("DATABASE_URL", migrated_url)
    return migrated_url


def test_async_drivers(app_database: str, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_async_app=ASYNC_APP)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*test_sqlalchemy_async*",
        "E*AssertionError: expected a message with key='order-9', value=b's2'; 0 matched.",
        "E*This transaction published 1 message(s):",
        "E*topic='orders.created' key=b'order-4' value=b's2'",
    ])
    # asyncpg's transaction blocks committed theirs; the rolled-back ones left nothing, nor
    # did the session whose block ended with the failure.
    conn = psycopg2.connect(app_database)
    with conn, conn.cursor() as cur:
        cur.execute("SELECT convert_from(message, 'UTF8') FROM kafka_messages ORDER BY id")
        assert [r[0] for r in cur.fetchall()] == ["from before", "a1", "pooled"]
    conn.close()
