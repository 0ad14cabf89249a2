"""A relay process's proof of life for its topic locks (issue 52).

A lock's timeout covers a holder that is slow as well as one that is dead, so a relay
restarted after a crash waited out its own predecessor's locks. The database can tell
the dead apart: a process registers its lock tokens in relay_lock_holders under a holder
key and holds the advisory lock on that key on a connection of its own for its whole
life. When the process dies, its sockets close and the server ends its backends, which
frees the key at once; LOCK_TOPICS then takes its locks over without waiting
(outbox_relay.control.locks.live_lock). A process that is stopped, paused or slow keeps its
connection, and so its key and its locks.

The key is held by a transaction left open on that connection, not by a session lock:
behind a pooler in transaction mode (PgBouncer) a session lock stays with a server
connection the pooler lends to others, recycles or resets, which could free the key of
a live process. An open transaction pins its server connection to this client until
the client goes; a pooler in statement mode refuses it, and the relay then runs
unregistered, under the timeout as before. The transaction takes nothing but that
lock: no transaction id, no snapshot and no table lock, so it holds back neither
VACUUM nor DDL. It shows as `idle in transaction` under the application name
`outbox-relay-liveness`.

Only a relay's run registers (outbox_relay.wiring.build_relay); migrate, status and the
operators' verbs do not, and their statements take no topic lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

import psycopg2
import psycopg2.extensions

from outbox_relay.config import PostgresConfig
from outbox_relay.control.db import Database, connect
from outbox_relay.errors import DatabaseUnavailableError, RelayError, first_line

log = logging.getLogger(__name__)

APPLICATION_NAME = "outbox-relay-liveness"
# How often the holder checks that its connection is still there, to reconnect it.
PROBE_INTERVAL_S = 1.0
# Holder keys tried at registration before giving up (a key is busy only after the
# sequence wrapped around onto a holder that still lives).
_KEY_ATTEMPTS = 5
_CLOSE_GRACE_S = 5.0
_MAX_RETRY_PAUSE_S = 60.0

# The liveness connection is idle inside its transaction for the process's life: the
# relay's own idle-in-transaction timeout (and PostgreSQL 17's transaction timeout)
# would end it. Both are set for this session only.
NO_IDLE_TIMEOUT = "SET idle_in_transaction_session_timeout = 0"
NO_TRANSACTION_TIMEOUT = "SET transaction_timeout = 0"
TRANSACTION_TIMEOUT_SINCE = 170000

NEXT_KEY = "SELECT nextval('relay_holder_key_seq')::integer AS key"

# The first statement of the transaction that lives as long as the process.
TAKE_KEY = """
SELECT pg_try_advisory_xact_lock(relay_holder_lock_class(), %(key)s) AS held,
       pg_backend_pid() AS backend
"""

PROBE = "SELECT 1"

# Again at every reconnection: the server's run is that of the key held now.
REGISTER = """
INSERT INTO relay_lock_holders (lock_token, holder_key)
SELECT t, %(key)s FROM unnest(%(tokens)s::varchar[]) AS t
ON CONFLICT (lock_token) DO UPDATE
SET holder_key = EXCLUDED.holder_key, server_started = pg_postmaster_start_time(),
    registered_at = now()
"""

# Registrations that prove nothing any more and hold nothing: a gone holder's, or one
# from another server run. One that still holds a lock or a session stays, so that its
# lock is still taken over at once; it goes at a later registration.
FORGET = """
DELETE FROM relay_lock_holders h
WHERE (h.lock_token IN (SELECT relay_gone_lock_tokens())
       OR h.server_started <> pg_postmaster_start_time())
  AND NOT EXISTS (SELECT 1 FROM kafka_topic_info i WHERE i.locked_by = h.lock_token)
  AND NOT EXISTS (SELECT 1 FROM relay_sessions s WHERE s.lock_token = h.lock_token)
"""


class Liveness:
    """Registers `tokens` under one holder key and holds it on a connection of its own; a
    daemon thread reconnects that connection, under the same key, if the server drops it."""

    def __init__(self, pg: PostgresConfig, tokens: Sequence[str], *,
                 probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self._pg = pg
        self._tokens = list(tokens)
        self._interval_s = probe_interval_s
        self._conn: psycopg2.extensions.connection | None = None
        self._key: int | None = None
        self._backend: int | None = None
        # The connection is the probe thread's and, at start and close, the caller's.
        self._guard = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-liveness", daemon=True)

    @property
    def key(self) -> int | None:
        return self._key

    @property
    def backend_pid(self) -> int | None:
        """The backend that holds the key now, as this process last saw it."""
        return self._backend

    def start(self) -> bool:
        """Registers and holds the key, then watches the connection. Returns whether the
        key is held: if not, the locks keep the timeout rule until a reconnection."""
        try:
            with self._guard:
                self._hold()
        except RelayError as exc:
            log.warning("liveness: not registered (%s): this relay's topic locks outlive "
                        "it by relay.lock_timeout_s; retrying", exc)
        self._thread.start()
        return self._backend is not None

    def close(self) -> None:
        """Ends the transaction, which frees the key, and forgets what holds nothing."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._interval_s + _CLOSE_GRACE_S)
        # A probe stuck on a dead network must not hold up the exit: the process's end
        # closes the socket all the same.
        if self._guard.acquire(timeout=_CLOSE_GRACE_S):
            try:
                self._drop()
            finally:
                self._guard.release()
        try:
            self._registry(FORGET)
        except RelayError as exc:
            log.debug("liveness: registrations not pruned at close: %s", exc)

    def _run(self) -> None:
        pause = self._interval_s
        while not self._done.wait(pause):
            with self._guard:
                if self._done.is_set() or self._alive():
                    continue
                try:
                    self._hold()
                except RelayError as exc:
                    # Tried again, less and less often: a pooler that refuses transactions
                    # refuses them every time.
                    log.debug("liveness: not back yet: %s", exc)
                    pause = min(_MAX_RETRY_PAUSE_S, pause * 2)
                    continue
            pause = self._interval_s
            log.warning("liveness: connection back, holder key %s held again", self._key)

    def _alive(self) -> bool:
        if self._conn is None:
            return False
        try:
            with self._conn.cursor() as cur:
                cur.execute(PROBE)
            return True
        except psycopg2.Error as exc:
            log.warning("liveness: connection lost (%s): until it is back, this relay's "
                        "topic locks may be taken over at once (fenced: its claims, "
                        "deletes and parks then change nothing)", first_line(exc))
            self._drop()
            return False

    def _hold(self) -> None:
        """Connects, takes the key (a new one at the first registration) in the
        transaction left open, then registers the tokens under it."""
        conn = connect(self._pg, APPLICATION_NAME)
        try:
            self._open(conn)
            for _ in range(_KEY_ATTEMPTS if self._key is None else 1):
                key = self._key if self._key is not None else self._next_key()
                with conn.cursor() as cur:
                    cur.execute(TAKE_KEY, {"key": key})
                    held, backend = cur.fetchone()
                if held:
                    break
                conn.rollback()
            else:
                raise DatabaseUnavailableError(
                    f"holder key {key} is held by another backend (an earlier one of this "
                    "relay, not ended yet)")
        except psycopg2.Error as exc:
            conn.close()
            raise DatabaseUnavailableError(f"liveness connection: {first_line(exc)}") from exc
        except RelayError:
            conn.close()
            raise
        # Registered only while the key is held, so a registration never names a free key
        # of a live process (FORGET would take it for a gone one).
        try:
            self._registry(FORGET, REGISTER, key=key)
        except RelayError:
            conn.close()
            raise
        self._conn, self._key, self._backend = conn, key, backend

    def _open(self, conn: psycopg2.extensions.connection) -> None:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(NO_IDLE_TIMEOUT)
            if conn.server_version >= TRANSACTION_TIMEOUT_SINCE:
                cur.execute(NO_TRANSACTION_TIMEOUT)
        conn.autocommit = False

    def _next_key(self) -> int:
        row = self._registry(NEXT_KEY)
        assert row is not None, "nextval returns a row"
        return int(row["key"])

    def _registry(self, *statements: str, key: int | None = None) -> dict[str, Any] | None:
        """Runs `statements` in one transaction on a short-lived connection (the liveness
        connection's transaction must take nothing but the key); the last one's row."""
        db = Database(self._pg, f"{APPLICATION_NAME}-registry")
        try:
            row = None
            with db.transaction() as cur:
                for statement in statements:
                    cur.execute(statement, {"key": key, "tokens": self._tokens})
                    row = dict(cur.fetchone()) if cur.description else None
            return row
        finally:
            db.close()

    def _drop(self) -> None:
        if self._conn is not None and not self._conn.closed:
            # A connection the server ended closes all the same.
            with contextlib.suppress(psycopg2.Error):
                self._conn.close()
        self._conn, self._backend = None, None
