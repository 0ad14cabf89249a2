"""The fault suite's plain tools: waiting on a condition, SQL on a test database,
topics and unique names.

Nothing here sleeps for a fixed time that assumes a fast machine: every wait is a
condition with a generous deadline, because other test sessions share the cores.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg2
from confluent_kafka.admin import AdminClient, NewTopic


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str,
               interval_s: float = 0.25, diagnose: Callable[[], str] | None = None) -> float:
    """Poll `predicate` until it holds; returns the seconds waited, or fails naming `what`."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        if predicate():
            return time.monotonic() - started
        if time.monotonic() >= deadline:
            extra = f"\n{diagnose()}" if diagnose else ""
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{extra}")
        time.sleep(interval_s)


def database_url(admin_url: str, name: str) -> str:
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


def query(url: str, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(url, connect_timeout=10)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def scalar(url: str, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
    return query(url, sql, params)[0][0]


def outbox_count(url: str) -> int:
    return int(scalar(url, "SELECT count(*) FROM kafka_messages"))


def outbox_ids(url: str) -> set[int]:
    return {i for (i,) in query(url, "SELECT id FROM kafka_messages")}


def session_ids(url: str) -> set[int]:
    """Ids claimed by sessions that exist right now."""
    return {i for (ids,) in query(url, "SELECT ids FROM relay_sessions") for i in ids}


def create_topics(bootstrap: str, topics: dict[str, int], **config: str) -> None:
    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, num_partitions=n, replication_factor=1, config=dict(config))
           for t, n in topics.items()]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
