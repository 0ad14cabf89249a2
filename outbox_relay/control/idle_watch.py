"""One thread polls every idle database of a relay of several (outbox_relay.stream.many).

An idle database's own thread polled its outbox every `relay.idle_poll_interval_s`: a
blocking round trip and a timed wait each, about 0.2 ms of the driver's CPU, which a
hundred idle databases paid 400 times a second. A database whose rounds found nothing
for a while parks here instead (outbox_relay.stream.before_spark): this thread sends the
same scan (PENDING_TOPICS) to every parked outbox at once, on an asynchronous connection
of each, and reads whichever answer comes, about 0.03 ms a poll. It wakes a database's
thread when its scan finds a topic ready, when its stop comes, when its park's time is
up, or when its connection fails: its own rounds then take over, errors included.

A database slow to answer delays no other: its scan stays in flight while the others'
are sent and read on time. One that does not answer within its park is given up: its
connection is closed, and its next park opens another.
"""

from __future__ import annotations

import contextlib
import logging
import math
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from outbox_relay.config import PostgresConfig
from outbox_relay.control.db import connect
from outbox_relay.control.pending import PENDING_TOPICS, TopicFilter, ready_topics, topic_states
from outbox_relay.errors import first_line

log = logging.getLogger(__name__)

APPLICATION_NAME = "outbox-relay-idle"
# The longest the thread waits without looking at its parked databases' stops.
_MAX_WAIT_S = 0.25


def _tick_after(t: float, spot: IdlePoll) -> float:
    """The first tick of `spot`'s interval after `t`. Every database with the same interval
    is due at the same moments, so that one pass of the thread sends all their scans:
    each due at its own moment, the thread passed over every parked database for each."""
    return (math.floor(t / spot.interval_s) + 1) * spot.interval_s


class IdlePoll:
    """One database's parked scan: its asynchronous connection and what wakes it. Built
    and connected by the database's thread; while parked, the watch's thread alone uses
    the connection."""

    def __init__(self, pg: PostgresConfig, params: dict[str, Any], topic_filter: TopicFilter,
                 interval_s: float) -> None:
        self._pg = pg
        self._params = params
        self._filter = topic_filter
        self.interval_s = interval_s
        self._conn: psycopg2.extensions.connection | None = None
        self._cur: Any = None
        self.sent_at: float | None = None  # when the scan in flight was sent
        self.due = 0.0
        self.until = 0.0
        self.stopped: Callable[[], bool] = lambda: False
        self.fd: int | None = None  # registered with the watch's selector
        self.woken = threading.Event()
        self.why = ""

    @property
    def where(self) -> str:
        return self._pg.where()

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def connect(self) -> None:
        """Opens the connection (raises UnreachableError), in the database's thread: a
        server slow to accept it holds up that database alone."""
        conn = connect(self._pg, APPLICATION_NAME, asynchronous=True)
        self._conn = conn
        self._cur = conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor)

    def fileno(self) -> int:
        assert self._conn is not None
        return int(self._conn.fileno())

    def send(self, now: float) -> None:
        self._cur.execute(PENDING_TOPICS, self._params)
        self.sent_at = now

    def receive(self) -> bool | None:
        """Reads what the server sent: None while the answer is incomplete, else whether
        it holds work for the database."""
        assert self._conn is not None
        if self._conn.poll() != psycopg2.extensions.POLL_OK:
            return None
        self.sent_at = None
        return bool(ready_topics(topic_states(self._cur.fetchall(), self._filter)))

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None
        self.sent_at = None


class IdleWatch:
    """Parks idle databases (`park`) and polls them all from one thread, started at the
    first park. Should that thread ever fail, every parked database is woken and the
    watch is no longer `usable`: each database then polls on its own again."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._guard = threading.Lock()
        self._parked: list[IdlePoll] = []
        self._arriving: list[IdlePoll] = []
        self._bell_r, self._bell_w = socket.socketpair()
        for end in (self._bell_r, self._bell_w):
            end.setblocking(False)
        self._selector.register(self._bell_r, selectors.EVENT_READ, None)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._next_tend = 0.0  # when a parked database may be due to be sent or woken

    @property
    def usable(self) -> bool:
        with self._guard:
            return not self._closed

    @property
    def parked(self) -> int:
        with self._guard:
            return len(self._parked) + len(self._arriving)

    def park(self, spot: IdlePoll, stopped: Callable[[], bool], up_to_s: float) -> str:
        """Blocks the calling database's thread until its outbox has work, `stopped()`,
        `up_to_s` passed or its scan failed; returns which, in words."""
        now = time.monotonic()
        spot.stopped, spot.due, spot.until = stopped, _tick_after(now, spot), now + up_to_s
        spot.woken.clear()
        with self._guard:
            if self._closed:
                return "the idle watch is closed"
            self._arriving.append(spot)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="relay-idle-watch",
                                                daemon=True)
                self._thread.start()
        self._ring()
        spot.woken.wait()
        return spot.why

    def close(self) -> None:
        """Wakes every parked database; later parks return at once."""
        with self._guard:
            self._closed = True
            thread = self._thread
        self._ring()
        if thread is not None:
            thread.join()
        self._selector.close()
        self._bell_r.close()
        self._bell_w.close()

    def _ring(self) -> None:
        with contextlib.suppress(BlockingIOError):  # rung already: it reads the whole bell
            self._bell_w.send(b"x")

    def _run(self) -> None:
        try:
            while self._round():
                pass
        except Exception:
            log.exception("idle watch: failed; each database polls its own outbox again")
            with self._guard:
                self._closed = True
        finally:
            with self._guard:
                self._parked += self._arriving
                self._arriving = []
            for spot in list(self._parked):
                self._wake(spot, "the idle watch ended")

    def _round(self) -> bool:
        """Takes the arrivals, tends every parked database when one may be due, then reads
        the answers that come until then; False once closed. Between two tendings only
        answers are read: a hundred answers come in many small batches."""
        with self._guard:
            if self._closed:
                return False
            arriving, self._arriving = self._arriving, []
        self._parked += arriving
        now = time.monotonic()
        if arriving or now >= self._next_tend:
            for spot in list(self._parked):
                self._tend(spot, now)
            self._next_tend = min([now + _MAX_WAIT_S, *(
                s.due if s.sent_at is None else s.until for s in self._parked)])
        for key, _ in self._selector.select(max(0.0, self._next_tend - time.monotonic())):
            if key.data is None:
                self._bell_r.recv(4096)
            else:
                self._read(key.data)
        return True

    def _tend(self, spot: IdlePoll, now: float) -> None:
        """Wakes a database that is stopped or whose time is up; sends its scan when due."""
        if spot.stopped():
            self._wake(spot, "its stop came")
        elif now >= spot.until:
            self._wake(spot, "its park's time is up")
        elif spot.sent_at is None and now >= spot.due:
            try:
                spot.send(now)
                spot.fd = spot.fileno()
                self._selector.register(spot.fd, selectors.EVENT_READ, spot)
            except psycopg2.Error as exc:
                self._wake(spot, f"its scan failed: {first_line(exc)}", broken=True)

    def _read(self, spot: IdlePoll) -> None:
        sent_at = spot.sent_at
        try:
            work = spot.receive()
        except psycopg2.Error as exc:
            self._wake(spot, f"its scan failed: {first_line(exc)}", broken=True)
            return
        if work is None:
            return
        self._forget_fd(spot)
        spot.due = _tick_after(sent_at or time.monotonic(), spot)
        if work:
            self._wake(spot, "its outbox has work")

    def _forget_fd(self, spot: IdlePoll) -> None:
        if spot.fd is not None:
            # A closed descriptor leaves epoll by itself; the selector's map must too.
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(spot.fd)
            spot.fd = None

    def _wake(self, spot: IdlePoll, why: str, broken: bool = False) -> None:
        """Hands the database back to its thread: a scan still in flight is given up with
        its connection, which the thread must not inherit busy."""
        self._forget_fd(spot)
        if spot.sent_at is not None or broken:
            spot.close()
        self._parked.remove(spot)
        spot.why = why
        log.debug("idle watch: %s woken, %s", spot.where, why)
        spot.woken.set()
