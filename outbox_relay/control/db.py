"""psycopg2 connections for the control plane, with driver errors translated at the boundary."""

from __future__ import annotations

import io
import logging
import select
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from outbox_relay.config import PostgresConfig
from outbox_relay.errors import (
    DatabaseError,
    DatabaseUnavailableError,
    UnreachableError,
    first_line,
)

log = logging.getLogger(__name__)

Params = Sequence[Any] | dict[str, Any] | None

PING = "SELECT 1"


def connect(pg: PostgresConfig, application_name: str, asynchronous: bool = False
            ) -> psycopg2.extensions.connection:
    """Open a connection with the relay's session settings, or raise UnreachableError.
    An `asynchronous` one (always autocommit) is open once this returns."""
    # No bitmap scans: the control plane's probes are `ORDER BY id LIMIT n` walks of
    # (topic, id) meant to stop at the first live rows. After an autoanalyze that caught
    # the outbox nearly empty, the planner chose a bitmap scan and a sort instead, which
    # reads every index entry and heap page of the topic, dead ones included, on every
    # call: the pending-topics scan went from 0.3 ms to 171 ms a call in a 2,000 msg/s
    # soak, every other minute (reports/performance-history.md, "The soak's spread").
    options = (
        "-c enable_bitmapscan=off "
        f"-c statement_timeout={pg.statement_timeout_ms} "
        f"-c idle_in_transaction_session_timeout={pg.idle_in_transaction_timeout_ms} "
        "-c TimeZone=UTC"
    )
    try:
        conn = psycopg2.connect(
            host=pg.host,
            port=pg.port,
            dbname=pg.database,
            user=pg.user,
            password=pg.password.get_secret_value() if pg.password else None,
            sslmode=pg.sslmode,
            connect_timeout=pg.connect_timeout_s,
            application_name=application_name,
            options=options,
            async_=asynchronous,
        )
        if asynchronous:
            _opened(conn, time.monotonic() + pg.connect_timeout_s)
        return conn
    except psycopg2.Error as exc:
        raise UnreachableError(
            f"cannot reach PostgreSQL at {pg.where()}: {first_line(exc)}"
        ) from None


def _opened(conn: psycopg2.extensions.connection, deadline: float) -> None:
    """Waits for an asynchronous connection to open, up to `deadline`: libpq leaves the
    connect timeout of those to the caller. poll(2), not select(2): a relay of a hundred
    databases holds descriptors past select's 1,024."""
    waiter = select.poll()
    while True:
        state = conn.poll()
        if state == psycopg2.extensions.POLL_OK:
            return
        left = deadline - time.monotonic()
        waiter.register(conn.fileno(), select.POLLIN if state == psycopg2.extensions.POLL_READ
                        else select.POLLOUT)
        if left <= 0 or not waiter.poll(left * 1000):
            conn.close()
            raise psycopg2.OperationalError("timeout expired")


class Database:
    """One control-plane connection that reconnects after the server went away."""

    def __init__(self, pg: PostgresConfig, application_name: str = "outbox-relay") -> None:
        self._pg = pg
        self._name = application_name
        self._conn: psycopg2.extensions.connection | None = None

    @property
    def config(self) -> PostgresConfig:
        return self._pg

    def _connection(self) -> psycopg2.extensions.connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._pg, self._name)
        return self._conn

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None

    @contextmanager
    def transaction(self) -> Iterator[psycopg2.extras.RealDictCursor]:
        """A transaction: committed on success, rolled back on any error."""
        conn = self._connection()
        with self._translated(conn), conn, conn.cursor(
                cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            yield cur

    def read(self, statement: str, params: Params = None) -> list[dict[str, Any]]:
        """The rows of one read-only statement, run on its own (autocommit): one round
        trip where a transaction takes three (BEGIN, the statement, COMMIT). For the
        polls an idle relay makes several times a second, in each of its databases."""
        with (self._autocommitted() as conn,
              conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur):
            cur.execute(statement, params)
            return [dict(r) for r in cur.fetchall()] if cur.description else []

    def copy_out(self, statement: str, params: Params = None) -> tuple[bytes, str]:
        """The rows of one read-only statement in PostgreSQL's binary COPY format
        (outbox_relay.direct.copy_format), run on its own as `read`, and the Python codec
        of their text (the connection's client encoding). COPY takes no bind parameters:
        the statement is bound by psycopg2's mogrify, the quoting its `execute` uses."""
        with self._autocommitted() as conn, conn.cursor() as cur:
            query = cur.mogrify(statement, params)
            out = io.BytesIO()
            cur.copy_expert(b"COPY (" + query + b") TO STDOUT (FORMAT binary)", out)
            return out.getvalue(), psycopg2.extensions.encodings[conn.encoding]

    @contextmanager
    def _autocommitted(self) -> Iterator[psycopg2.extensions.connection]:
        """The connection in autocommit for one statement, driver errors translated."""
        conn = self._connection()
        with self._translated(conn):
            conn.autocommit = True
            try:
                yield conn
            finally:
                if not conn.closed:
                    conn.autocommit = False

    @contextmanager
    def _translated(self, conn: psycopg2.extensions.connection) -> Iterator[None]:
        """Driver errors as the relay's own, the connection forgotten once broken."""
        try:
            yield
        except psycopg2.Error as exc:
            self._forget_if_broken(conn)
            kind = (
                DatabaseUnavailableError
                if isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError)
                else DatabaseError
            )
            raise kind(f"PostgreSQL at {self._pg.where()}: {first_line(exc)}") from exc

    def _forget_if_broken(self, conn: psycopg2.extensions.connection) -> None:
        if conn.closed or (
            isinstance(conn.info.transaction_status, int)
            and (conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_UNKNOWN)
        ):
            self.close()

    def check_reachable(self) -> None:
        """Raises DatabaseUnavailableError or UnreachableError while the server does not
        answer."""
        self.execute(PING)

    def all(self, statement: str, params: Params = None) -> list[dict[str, Any]]:
        with self.transaction() as cur:
            cur.execute(statement, params)
            return [dict(r) for r in cur.fetchall()] if cur.description else []

    def one(self, statement: str, params: Params = None) -> dict[str, Any] | None:
        rows = self.all(statement, params)
        return rows[0] if rows else None

    def execute(self, statement: str, params: Params = None) -> int:
        with self.transaction() as cur:
            cur.execute(statement, params)
            return cur.rowcount
