"""Publishing from an async application: `await outbox_relay.publish_async(...)` and
`publish_many_async`, the sync publisher's rules (outbox_relay.outbox.publisher) on an async
connection, inside the caller's own transaction.

Supported: a psycopg (3) AsyncConnection, an asyncpg Connection (a pool's connection
included), a SQLAlchemy AsyncConnection or AsyncSession on either driver. As in the sync
publisher, a driver is recognised among the modules already imported; nothing here
imports one. The checks (outbox_relay.outbox.checks), the statement, its pages and the error
translation (outbox_relay.outbox.statement) are the sync publisher's own.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from outbox_relay.errors import DatabaseUnavailableError, PublishError
from outbox_relay.outbox.checks import Message, OutboxRow, checked_rows, limits
from outbox_relay.outbox.statement import (
    INSERT_MESSAGES,
    INSERT_MESSAGES_NUMBERED,
    checked_ids,
    dbapi_outside,
    insert_statement,
    pages,
    params,
    params_for,
    refuse_outside,
    sqlalchemy_translated,
    translated,
)

AsyncInsert = Callable[[Sequence[OutboxRow]], Awaitable[list[int]]]


async def publish_async(conn: Any, topic: str, value: bytes | str | None, *,
                        key: bytes | str | None = None, partition_key: str | None = None,
                        headers: Mapping[str, str] | None = None,
                        event_type: str | None = None, content_type: str | None = None,
                        header_prefix: str | None = None, max_bytes: int | None = None,
                        allow_autocommit: bool = False, trace_context: bool = True) -> int:
    """Write one message to the outbox in the caller's transaction; returns its id.

    The arguments, the checks and the refusals are `outbox_relay.publish`'s. Outside a
    transaction (an asyncpg connection with no `conn.transaction()` started, an
    autocommit psycopg AsyncConnection with none begun, a SQLAlchemy AsyncConnection or
    AsyncSession with none begun or on an AUTOCOMMIT engine) it raises
    NoTransactionError, unless `allow_autocommit=True`.
    """
    message = Message(topic, value, key, partition_key, headers, event_type, content_type)
    return (await _publish(conn, [message], header_prefix, max_bytes, allow_autocommit,
                           False, trace_context))[0]


async def publish_many_async(conn: Any, messages: Iterable[Message], *,
                             header_prefix: str | None = None, max_bytes: int | None = None,
                             allow_autocommit: bool = False,
                             trace_context: bool = True) -> list[int]:
    """Write messages to the outbox in the caller's transaction; returns their ids in order.

    As `outbox_relay.publish_many`: every message checked before any is written, then one
    statement per page of up to PAGE_ROWS rows.
    """
    return await _publish(conn, messages, header_prefix, max_bytes, allow_autocommit, True,
                          trace_context)


async def _publish(conn: Any, messages: Iterable[Message], header_prefix: str | None,
                   max_bytes: int | None, allow_autocommit: bool, numbered: bool,
                   trace_context: bool) -> list[int]:
    insert, outside = await _target(conn)
    rows = checked_rows(messages, limits(header_prefix, max_bytes), numbered, trace_context)
    refuse_outside(outside, allow_autocommit)
    ids: list[int] = []
    for page in pages(rows):
        ids.extend(checked_ids(await insert(page), page))
    return ids


async def _target(conn: Any) -> tuple[AsyncInsert, str | None]:
    """How to insert through `conn`, and why it is outside a transaction (None if inside)."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(conn, psycopg.AsyncConnection):
        return _psycopg_insert(conn, psycopg), dbapi_outside(conn)
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is not None and isinstance(
            conn, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
        return _asyncpg_insert(conn, asyncpg), _asyncpg_outside(conn)
    aio = sys.modules.get("sqlalchemy.ext.asyncio")
    if aio is not None and isinstance(conn, aio.async_scoped_session):
        conn = conn()  # the registry's current AsyncSession
    if aio is not None and isinstance(conn, aio.AsyncSession | aio.AsyncConnection):
        return await _sqlalchemy(conn, isinstance(conn, aio.AsyncSession))
    raise PublishError(
        f"cannot publish through a {type(conn).__module__}.{type(conn).__qualname__}: "
        "pass a psycopg AsyncConnection, an asyncpg Connection, or a SQLAlchemy "
        "AsyncConnection or AsyncSession (outbox_relay.publish takes the sync ones)")


def _asyncpg_outside(conn: Any) -> str | None:
    if conn.is_closed():
        raise DatabaseUnavailableError("cannot publish to the outbox: the connection is closed")
    # asyncpg runs each statement in its own transaction unless one was started.
    if not conn.is_in_transaction():
        return "the asyncpg connection has no transaction started"
    return None


def _psycopg_insert(conn: Any, psycopg: Any) -> AsyncInsert:
    async def insert(page: Sequence[OutboxRow]) -> list[int]:
        try:
            # A plain tuple cursor, whatever row factory the caller set on conn.
            async with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
                await cur.execute(INSERT_MESSAGES, params(page))
                return [row[0] for row in await cur.fetchall()]
        except psycopg.Error as exc:
            lost = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
            raise translated(exc, lost) from exc

    return insert


def _asyncpg_insert(conn: Any, asyncpg: Any) -> AsyncInsert:
    errors = asyncpg.exceptions
    # What a lost or unusable connection raises: the server's class 08 and 57 (operator
    # intervention: terminated, shut down), asyncpg's own interface errors, the socket's.
    lost_kinds = (errors.PostgresConnectionError, errors.OperatorInterventionError,
                  errors.InterfaceError, OSError)

    async def insert(page: Sequence[OutboxRow]) -> list[int]:
        try:
            rows = await conn.fetch(INSERT_MESSAGES_NUMBERED, *params_for("numeric_dollar", page))
        except (errors.PostgresError, errors.InterfaceError, OSError) as exc:
            raise translated(exc, isinstance(exc, lost_kinds)) from exc
        return [row[0] for row in rows]

    return insert


async def _sqlalchemy(conn: Any, session: bool) -> tuple[AsyncInsert, str | None]:
    """An AsyncSession or AsyncConnection: its transaction, and the DBAPI connection's
    autocommit (an engine with isolation_level="AUTOCOMMIT" begins no-op transactions)."""
    kind = "AsyncSession" if session else "AsyncConnection"

    async def connection() -> Any:
        return await conn.connection() if session else conn

    outside = None
    if not conn.in_transaction():
        outside = f"the SQLAlchemy {kind} has no transaction begun"
    else:
        raw = await (await connection()).get_raw_connection()
        if _driver_outside(raw.dbapi_connection.autocommit, raw.driver_connection):
            outside = (f"the SQLAlchemy {kind}'s DBAPI connection is in autocommit mode "
                       "with no transaction begun")
    exc_module = sys.modules["sqlalchemy.exc"]

    async def insert(page: Sequence[OutboxRow]) -> list[int]:
        target = await connection()
        paramstyle = target.dialect.paramstyle
        try:
            result = await target.exec_driver_sql(insert_statement(paramstyle),
                                                  params_for(paramstyle, page))
        except exc_module.DBAPIError as exc:
            raise sqlalchemy_translated(exc_module, exc) from exc
        return [row[0] for row in result]

    return insert, outside


def _driver_outside(autocommit: bool, driver_conn: Any) -> bool:
    """Whether a SQLAlchemy async adapter's connection commits each statement alone: in
    autocommit, with no transaction begun on the driver's own connection. Out of
    autocommit, both adapters begin a transaction with the first statement."""
    if not autocommit:
        return False
    in_transaction = getattr(driver_conn, "is_in_transaction", None)
    if in_transaction is not None:  # asyncpg
        return not in_transaction()
    return dbapi_outside(driver_conn) is not None  # psycopg
