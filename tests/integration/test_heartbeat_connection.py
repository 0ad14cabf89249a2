"""Two heartbeats never share their connection at once: a heartbeat whose stop() gave up
waiting (its renewal blocked on a row lock) still owns the connection until its statement
ends, and the next batch's heartbeat waits for it instead of running beside it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterator

import psycopg2
import pytest

from outbox_relay.config import Config
from outbox_relay.control.locks import Backoff, TopicLocks
from outbox_relay.stream import heartbeat as heartbeat_module
from outbox_relay.stream.heartbeat import Heartbeat
from outbox_relay.wiring import control_plane
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import unique

INTERVAL_S = 0.05
BOUND_S = 30.0  # what each wait below allows before the test fails


class _WatchedLocks(TopicLocks):
    """The real renewal, with how many run at once on this connection."""

    def __init__(self, locks: TopicLocks) -> None:
        super().__init__(locks.db, locks.token, locks.lock_timeout_s,
                         Backoff(locks.backoff.base_s, locks.backoff.max_s))
        self._count = threading.Lock()
        self.in_flight = self.most = self.done = 0
        self.entered = threading.Event()
        self.overlapped = threading.Event()
        self.finished = threading.Event()

    def heartbeat(self, topics: Collection[str]) -> set[str]:
        with self._count:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        self.entered.set()
        if self.in_flight > 1:
            self.overlapped.set()
        try:
            return super().heartbeat(topics)
        finally:
            with self._count:
                self.in_flight -= 1
                self.done += 1
            self.finished.set()


class _Said(logging.Handler):
    """Sets `event` when the heartbeat logs that it waits for the previous one."""

    def __init__(self, event: threading.Event) -> None:
        super().__init__(logging.WARNING)
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if "renewing once it ends" in record.getMessage():
            self.event.set()


@pytest.fixture
def topic() -> str:
    return unique("beat")


@pytest.fixture
def config(make_config: ConfigFactory, topic: str) -> Config:
    return make_config([topic])


@pytest.fixture
def row_lock(migrated_url: str) -> Iterator[psycopg2.extensions.connection]:
    """Another session's connection; what it locks stays locked until the test commits."""
    conn = psycopg2.connect(migrated_url)
    yield conn
    conn.rollback()
    conn.close()


def test_a_heartbeat_that_outlived_its_stop_keeps_the_next_one_off_its_connection(
    config: Config, topic: str, row_lock: psycopg2.extensions.connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heartbeat_module, "_JOIN_GRACE_S", 0.2)
    plane = control_plane(config, "beat-relay", "test-beat")
    plane.locks.acquire([topic])
    locks = _WatchedLocks(plane.heartbeat_locks)
    tried = threading.Event()
    said = _Said(tried)
    logging.getLogger(heartbeat_module.__name__).addHandler(said)
    with row_lock.cursor() as cur:  # the renewal's UPDATE now waits for this session
        cur.execute("SELECT 1 FROM kafka_topic_info WHERE topic = %s FOR UPDATE", (topic,))
    first = Heartbeat(locks, [topic], INTERVAL_S, lambda: True, on_lost=lambda _: None)
    second = Heartbeat(locks, [topic], INTERVAL_S, lambda: True, on_lost=lambda _: None)
    try:
        first.__enter__()
        assert locks.entered.wait(BOUND_S), "the first heartbeat never renewed"
        first.stop()
        assert first._thread.is_alive(), "the renewal did not block: nothing was tested"
        threading.Thread(target=lambda: tried.set() if locks.overlapped.wait(BOUND_S) else None,
                         daemon=True).start()
        locks.finished.clear()
        second.__enter__()
        assert tried.wait(BOUND_S), "the second heartbeat never tried to renew"
        overlapped = locks.most
        row_lock.commit()  # the first renewal ends; the second may renew now
        first._thread.join(BOUND_S)
        assert locks.finished.wait(BOUND_S)
        locks.finished.clear()
        assert locks.finished.wait(BOUND_S), "the second heartbeat did not renew after"
    finally:
        row_lock.rollback()
        second.stop()
        logging.getLogger(heartbeat_module.__name__).removeHandler(said)
        plane.db.close()
        plane.heartbeat_locks.db.close()
    assert overlapped == 1, f"{overlapped} renewals ran at once on one connection"
    assert not first._thread.is_alive()
