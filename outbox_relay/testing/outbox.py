"""Reads what the current transaction of an application's connection wrote to the outbox.

"What this transaction published" is the rows of kafka_messages whose `xact_id` is the
connection's current top-level transaction id: the column's default is
`pg_current_xact_id()` (schema 0005), which is the top-level id inside a savepoint too.
So a row written in a savepoint that is still live or released counts, a row of a
savepoint rolled back is gone, and rows committed earlier, by an earlier test or by other
sessions are not counted, whatever their ids. A transaction that wrote nothing has no id
yet (`pg_current_xact_id_if_assigned()` is NULL) and published nothing. The read goes
through the caller's connection, inside its transaction, so uncommitted rows are seen.

A driver is recognised as outbox_relay.outbox.publisher recognises it, among the modules already
imported: nothing here imports a driver.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from outbox_relay.errors import MigrationError, PublishError

# No parameters: the same text runs on every driver and paramstyle.
READ_PUBLISHED = """
SELECT id, topic, message, key, partition_key, headers::text
FROM kafka_messages
WHERE xact_id = pg_current_xact_id_if_assigned()
ORDER BY id
"""

# (module, class, family, async): looked up in sys.modules, never imported here.
KINDS = (("psycopg2", "extensions.connection", "dbapi", False),
         ("psycopg", "Connection", "dbapi", False),
         ("sqlalchemy.orm", "Session", "sqlalchemy", False),
         ("sqlalchemy.orm", "scoped_session", "sqlalchemy", False),
         ("sqlalchemy.engine", "Connection", "sqlalchemy", False),
         ("psycopg", "AsyncConnection", "dbapi", True),
         ("asyncpg", "Connection", "asyncpg", True),
         ("asyncpg.pool", "PoolConnectionProxy", "asyncpg", True),
         ("sqlalchemy.ext.asyncio", "AsyncConnection", "sqlalchemy", True),
         ("sqlalchemy.ext.asyncio", "AsyncSession", "sqlalchemy", True))


@dataclass(frozen=True)
class PublishedMessage:
    """One row of kafka_messages as an application wrote it: key and value as bytes,
    headers decoded from their JSON (empty when the row has none)."""

    id: int
    topic: str
    value: bytes | None
    key: bytes | None
    partition_key: str | None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def event_type(self) -> str | None:
        """The `event_type=` given to publish (stored as the CloudEvents `ce_type` header)."""
        return self.headers.get("ce_type")

    def json(self) -> Any:
        """The value parsed as JSON."""
        if self.value is None:
            raise ValueError(f"message {self.id} to {self.topic!r} has no value (a tombstone)")
        return json.loads(self.value)


def published(conn: Any) -> list[PublishedMessage]:
    """The messages the current transaction of `conn` wrote, in id order: a psycopg2 or
    psycopg connection, or a SQLAlchemy Session or Connection."""
    family, is_async = kind(conn)
    if is_async:
        raise TypeError(f"{_name(conn)} is an async connection: use the *_async variant "
                        "(await outbox.assert_published_async(conn, ...), ...)")
    try:
        if family == "dbapi":
            with conn.cursor(**_tuple_cursor(conn)) as cur:
                cur.execute(READ_PUBLISHED)
                return _decoded(cur.fetchall())
        return _decoded(conn.execute(_text()).all())
    except Exception as exc:
        _explain_missing_schema(exc)
        raise


async def published_async(conn: Any) -> list[PublishedMessage]:
    """As `published`, for psycopg's AsyncConnection, asyncpg's Connection (or a pool's),
    and SQLAlchemy's AsyncConnection or AsyncSession."""
    family, is_async = kind(conn)
    if not is_async:
        raise TypeError(f"{_name(conn)} is a sync connection: use the method without _async")
    try:
        if family == "dbapi":
            async with conn.cursor(**_tuple_cursor(conn)) as cur:
                await cur.execute(READ_PUBLISHED)
                return _decoded(await cur.fetchall())
        if family == "asyncpg":
            return _decoded(await conn.fetch(READ_PUBLISHED))
        return _decoded((await conn.execute(_text())).all())
    except Exception as exc:
        _explain_missing_schema(exc)
        raise


# undefined_table, undefined_column: a database without the relay's schema (or an older
# one, before xact_id).
_NO_SCHEMA = {"42P01", "42703"}


def _explain_missing_schema(exc: BaseException) -> None:
    """MigrationError saying what to do, when the driver's error (any of the drivers, or
    SQLAlchemy's wrapper of one) says the outbox table or its xact_id column is missing."""
    for err in (exc, getattr(exc, "orig", None)):
        code = getattr(err, "pgcode", None) or getattr(err, "sqlstate", None)
        if code in _NO_SCHEMA:
            raise MigrationError(
                "cannot read what this transaction published: the database has no "
                "kafka_messages with the relay's schema (PostgreSQL says: "
                f"{str(err).strip().splitlines()[0]}). Apply it to the test database "
                "once: RELAY_POSTGRES_URL=<its url> outbox-relay migrate") from exc


def kind(conn: Any) -> tuple[str, bool]:
    """The connection's family (dbapi, sqlalchemy, asyncpg) and whether it is async."""
    for module, cls, family, is_async in KINDS:
        if _isinstance(conn, module, cls):
            return family, is_async
    raise PublishError(
        f"cannot read the outbox through a {_name(conn)}: pass a psycopg2 or psycopg "
        "connection, a SQLAlchemy Session or Connection, or (to the *_async variants) "
        "a psycopg AsyncConnection, an asyncpg Connection, or a SQLAlchemy AsyncConnection "
        "or AsyncSession")


def _isinstance(conn: Any, module_name: str, dotted: str) -> bool:
    found: Any = sys.modules.get(module_name)
    for name in dotted.split("."):
        found = getattr(found, name, None)
    return isinstance(found, type) and isinstance(conn, found)


def _tuple_cursor(conn: Any) -> dict[str, Any]:
    """A plain tuple cursor, whatever cursor or row factory the caller set on conn."""
    if type(conn).__module__.startswith("psycopg2"):
        return {"cursor_factory": sys.modules["psycopg2.extensions"].cursor}
    return {"row_factory": sys.modules["psycopg.rows"].tuple_row}


def _name(conn: Any) -> str:
    return f"{type(conn).__module__}.{type(conn).__qualname__}"


def _text() -> Any:
    return sys.modules["sqlalchemy"].text(READ_PUBLISHED)


def _decoded(rows: Any) -> list[PublishedMessage]:
    return [PublishedMessage(
        id=int(row[0]), topic=row[1], value=_bytes(row[2]), key=_bytes(row[3]),
        partition_key=row[4], headers=json.loads(row[5]) if row[5] is not None else {},
    ) for row in rows]


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)
