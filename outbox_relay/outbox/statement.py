"""What the sync and async publishers share, whatever the driver: the one INSERT statement
(rendered for each driver's paramstyle), its pages and parameters, the refusal outside a
transaction, and the translation of a driver's error into the project's own. Nothing
here imports a driver: a driver's module or connection is passed in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from outbox_relay.errors import (
    DatabaseError,
    DatabaseUnavailableError,
    NoTransactionError,
    PublishError,
)
from outbox_relay.outbox.checks import OutboxRow

# The statement's parameters, in their positional order ($1..$5).
COLUMNS = ("topics", "messages", "keys", "partition_keys", "headers")

# One statement per page. unnest keeps the statement text fixed whatever the page's size,
# the same for every driver; ORDER BY n inserts (and so numbers and returns) the rows in
# the caller's order. `{name}` is a parameter's marker in the driver's paramstyle.
_TEMPLATE = """
INSERT INTO kafka_messages (topic, message, key, partition_key, headers)
SELECT u.topic, u.message, u.key, u.partition_key, u.headers::jsonb
FROM unnest({topics}::varchar[], {messages}::bytea[], {keys}::bytea[],
            {partition_keys}::varchar[], {headers}::text[])
     WITH ORDINALITY AS u(topic, message, key, partition_key, headers, n)
ORDER BY u.n
RETURNING id
"""

# The paramstyles of the drivers served: psycopg2 and psycopg (pyformat), asyncpg
# (numeric_dollar, SQLAlchemy's name for asyncpg's $n).
_MARKERS = {
    "pyformat": lambda i, name: f"%({name})s",
    "numeric_dollar": lambda i, name: f"${i}",
}


def insert_statement(paramstyle: str) -> str:
    """The INSERT in a driver's paramstyle: the same statement, only the markers differ."""
    marker = _MARKERS.get(paramstyle)
    if marker is None:
        raise PublishError(f"cannot publish through a driver of paramstyle {paramstyle!r}: "
                           f"supported are {', '.join(_MARKERS)}")
    return _TEMPLATE.format(**{name: marker(i, name) for i, name in enumerate(COLUMNS, 1)})


INSERT_MESSAGES = insert_statement("pyformat")  # psycopg2, psycopg: %(name)s
INSERT_MESSAGES_NUMBERED = insert_statement("numeric_dollar")  # asyncpg: $1..$5

# A page ends at whichever comes first: few round trips, and a statement whose size
# (psycopg2 sends bytea as hex text, twice the bytes) stays far from PostgreSQL's 1 GB.
PAGE_ROWS = 2_000
PAGE_BYTES = 16 * 1024 * 1024

PQTRANS_IDLE = 0  # libpq's PQTRANS_IDLE: psycopg2's and psycopg's constants are this value


def pages(rows: Sequence[OutboxRow]) -> Iterator[Sequence[OutboxRow]]:
    """The rows cut into pages of at most PAGE_ROWS rows and PAGE_BYTES bytes (a row
    bigger than PAGE_BYTES goes alone), in order."""
    start, size = 0, 0
    for i, row in enumerate(rows):
        if i > start and (i - start >= PAGE_ROWS or size + row.size > PAGE_BYTES):
            yield rows[start:i]
            start, size = i, 0
        size += row.size
    if start < len(rows):
        yield rows[start:]


def params(page: Sequence[OutboxRow]) -> dict[str, list[Any]]:
    """The page's parameters by name (pyformat)."""
    return {
        "topics": [r.topic for r in page],
        "messages": [r.message for r in page],
        "keys": [r.key for r in page],
        "partition_keys": [r.partition_key for r in page],
        "headers": [r.headers for r in page],
    }


def params_for(paramstyle: str, page: Sequence[OutboxRow]) -> dict[str, list[Any]] | tuple[
        list[Any], ...]:
    """The page's parameters as the statement of `paramstyle` takes them."""
    named = params(page)
    return named if paramstyle == "pyformat" else tuple(named[name] for name in COLUMNS)


def refuse_outside(outside: str | None, allow_autocommit: bool) -> None:
    """NoTransactionError when the connection is outside a transaction (`outside` says why)."""
    if outside is not None and not allow_autocommit:
        raise NoTransactionError(
            f"refusing to publish outside a transaction: {outside}. The message would "
            "commit apart from the application's data; begin a transaction, or pass "
            "allow_autocommit=True to write it anyway")


def checked_ids(got: list[int], page: Sequence[OutboxRow]) -> list[int]:
    if len(got) != len(page):
        raise PublishError(f"kafka_messages took {len(got)} of {len(page)} rows: a rule "
                           "or trigger on the table dropped some; roll back")
    return got


def dbapi_outside(raw: Any) -> str | None:
    """Why a psycopg2 or psycopg (sync or async) connection is outside a transaction."""
    if raw.closed:
        raise DatabaseUnavailableError("cannot publish to the outbox: the connection is closed")
    # A connection out of autocommit opens a transaction with its first statement, so
    # only autocommit with none begun explicitly (psycopg's `conn.transaction()`, or a
    # BEGIN) writes a row that commits alone.
    if raw.autocommit and raw.info.transaction_status == PQTRANS_IDLE:
        return "the connection is in autocommit mode with no transaction begun"
    return None


def translated(exc: BaseException, lost: bool) -> DatabaseError:
    """The project's error for a driver's: DatabaseUnavailableError if the connection is lost."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else type(exc).__name__
    kind = DatabaseUnavailableError if lost else DatabaseError
    return kind(f"cannot publish to the outbox: PostgreSQL says: {first}")


def sqlalchemy_translated(exc_module: Any, exc: Any) -> DatabaseError:
    """The project's error for a sqlalchemy.exc.DBAPIError (sync or async)."""
    lost = exc.connection_invalidated or isinstance(
        exc, exc_module.OperationalError | exc_module.InterfaceError)
    return translated(exc.orig or exc, lost)
