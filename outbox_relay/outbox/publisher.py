"""Publishing from an application: rows of kafka_messages in the caller's own transaction.

The outbox works only if the message commits or rolls back with the application's own
data, so the publisher writes through the caller's connection, inside the caller's
transaction, and refuses a connection that would commit the row on its own. Supported:
a psycopg2 connection, a psycopg (3) connection, a SQLAlchemy Session or Connection on
either driver. A driver is recognised by the type of the object passed, looked up among
the modules already imported: the publisher imports no driver the caller does not use,
and neither pyspark nor a Kafka client.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from outbox_relay.errors import PublishError
from outbox_relay.outbox.checks import Message, checked_rows, limits
from outbox_relay.outbox.statement import (
    INSERT_MESSAGES,
    PAGE_BYTES,
    PAGE_ROWS,
    checked_ids,
    dbapi_outside,
    pages,
    params,
    refuse_outside,
    sqlalchemy_translated,
    translated,
)

# The shared statement and page bounds, where callers of the sync publisher found them.
__all__ = ["INSERT_MESSAGES", "PAGE_BYTES", "PAGE_ROWS", "publish", "publish_many"]

Insert = Callable[[dict[str, list[Any]]], list[int]]


def publish(conn: Any, topic: str, value: bytes | str | None, *,
            key: bytes | str | None = None, partition_key: str | None = None,
            headers: Mapping[str, str] | None = None, event_type: str | None = None,
            content_type: str | None = None, header_prefix: str | None = None,
            max_bytes: int | None = None, allow_autocommit: bool = False,
            trace_context: bool = True) -> int:
    """Write one message to the outbox in the caller's transaction; returns its id.

    `value` and `key` are bytes, str (stored as UTF-8) or None; `partition_key` (the text
    Kafka's partition is computed from instead of the key) is a str or None; `headers` is
    a mapping of str to str, sent as Kafka record headers. `event_type` and
    `content_type` are stored as the headers `ce_type` and `content-type`: on a topic
    whose rule sets `cloudevents = true`, the relay sends the record as a CloudEvent
    (outbox_relay.rules.cloudevents), and the size check counts the attributes it adds.

    When OpenTelemetry is installed and a span is current, its W3C `traceparent` (and
    `tracestate`) go into the headers (outbox_relay.outbox.trace), unless `trace_context=False`
    or OUTBOX_RELAY_TRACE_CONTEXT=off. A `traceparent` or `tracestate` header the caller
    gives (in any case) is kept, and then neither of the span's is added.

    Checked first, and refused with InvalidMessageError before anything is written, is what
    the relay would refuse: an illegal topic name, a header name starting with
    `header_prefix`, headers that are not a mapping of str to str, and a message whose
    size (value + key + headers as JSON text, in bytes) exceeds `max_bytes`. Both limits
    default to the relay's defaults: `header_prefix` to RelaySettings.header_prefix
    ("outbox-relay."), `max_bytes` to the relay's payload allowance (outbox_relay.control.
    record_size.payload_allowance) for a topic with Kafka's default max.message.bytes
    (1,048,588) under the default producer settings and source name, with the prefix in
    effect. A relay configured otherwise, or a topic with a smaller limit, needs the
    caller to pass its values. Not checked here, as they need Kafka or the relay's state:
    a keyless message to a compacted topic, and a key with a message parked.

    Outside a transaction (an autocommit connection not in an explicit one, a SQLAlchemy
    Session or Connection with no transaction begun) it raises NoTransactionError, unless
    `allow_autocommit=True`. With a psycopg2 or psycopg connection, that opt-out lets the
    row commit at once; a SQLAlchemy Session or Connection begins a transaction of its
    own then, which the caller still commits.
    """
    message = Message(topic, value, key, partition_key, headers, event_type, content_type)
    return _publish(conn, [message], header_prefix, max_bytes, allow_autocommit, False,
                    trace_context)[0]


def publish_many(conn: Any, messages: Iterable[Message], *, header_prefix: str | None = None,
                 max_bytes: int | None = None, allow_autocommit: bool = False,
                 trace_context: bool = True) -> list[int]:
    """Write messages to the outbox in the caller's transaction; returns their ids in order.

    Every message is checked as `publish` checks one, before anything is written: one bad
    message writes none of them. Rows go in pages of up to PAGE_ROWS rows, one statement
    (one round trip) each. Under `allow_autocommit=True` on an autocommit psycopg
    connection, each page commits by itself.
    """
    return _publish(conn, messages, header_prefix, max_bytes, allow_autocommit, True,
                    trace_context)


def _publish(conn: Any, messages: Iterable[Message], header_prefix: str | None,
             max_bytes: int | None, allow_autocommit: bool, numbered: bool,
             trace_context: bool) -> list[int]:
    insert, outside = _target(conn)
    rows = checked_rows(messages, limits(header_prefix, max_bytes), numbered, trace_context)
    refuse_outside(outside, allow_autocommit)
    ids: list[int] = []
    for page in pages(rows):
        ids.extend(checked_ids(insert(params(page)), page))
    return ids


def _target(conn: Any) -> tuple[Insert, str | None]:
    """How to insert through `conn`, and why it is outside a transaction (None if inside)."""
    for name, kind in (("psycopg2", "extensions.connection"), ("psycopg", "Connection")):
        driver = sys.modules.get(name)
        if driver is not None and isinstance(conn, _attr(driver, kind)):
            return _dbapi_insert(conn, driver), dbapi_outside(conn)
    orm, engine = sys.modules.get("sqlalchemy.orm"), sys.modules.get("sqlalchemy.engine")
    if orm is not None and isinstance(conn, orm.scoped_session):
        conn = conn()  # the registry's current Session (Flask-SQLAlchemy's `db.session`)
    if orm is not None and isinstance(conn, orm.Session):
        return _sqlalchemy(conn, conn.connection, "Session")
    if engine is not None and isinstance(conn, engine.Connection):
        return _sqlalchemy(conn, lambda: conn, "Connection")
    raise PublishError(
        f"cannot publish through a {type(conn).__module__}.{type(conn).__qualname__}: "
        "pass a psycopg2 or psycopg connection, or a SQLAlchemy Session or Connection")


def _attr(module: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        module = getattr(module, name)
    return module


def _dbapi_insert(conn: Any, driver: Any) -> Insert:
    # A plain tuple cursor, whatever cursor or row factory the caller set on conn.
    if driver.__name__ == "psycopg2":
        cursor_args = {"cursor_factory": driver.extensions.cursor}
    else:
        cursor_args = {"row_factory": driver.rows.tuple_row}

    def insert(values: dict[str, list[Any]]) -> list[int]:
        try:
            with conn.cursor(**cursor_args) as cur:
                cur.execute(INSERT_MESSAGES, values)
                return [row[0] for row in cur.fetchall()]
        except driver.Error as exc:
            lost = isinstance(exc, driver.OperationalError | driver.InterfaceError)
            raise translated(exc, lost) from exc

    return insert


def _sqlalchemy(conn: Any, connection: Callable[[], Any], kind: str) -> tuple[Insert, str | None]:
    """A Session or Connection: its transaction, and the DBAPI connection's autocommit
    (an engine with isolation_level="AUTOCOMMIT" begins transactions that are no-ops)."""
    outside = None
    if not conn.in_transaction():
        outside = f"the SQLAlchemy {kind} has no transaction begun"
    elif (raw := dbapi_outside(connection().connection.dbapi_connection)) is not None:
        outside = f"the SQLAlchemy {kind}'s DBAPI {raw.removeprefix('the ')}"
    exc_module = sys.modules["sqlalchemy.exc"]

    def insert(values: dict[str, list[Any]]) -> list[int]:
        try:
            return [row[0] for row in connection().exec_driver_sql(INSERT_MESSAGES, values)]
        except exc_module.DBAPIError as exc:
            raise sqlalchemy_translated(exc_module, exc) from exc

    return insert, outside
