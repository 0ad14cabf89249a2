"""The bench's own local stack: fresh databases and topics per workload, offset watching."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

import outbox_relay.stack
from outbox_relay.config import Config
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate
from outbox_relay.stack import StackInfo

REPO = Path(__file__).resolve().parents[1]
# The bench's stack is its own, so tests others run at the same time don't collide.
DEFAULT_STACK_DIR = REPO / ".relay-data" / "bench-stack"
WORK_DIR = REPO / ".relay-data" / "bench"


SHIPPED_PROFILE = REPO / "conf" / "local.toml"


def shipped_profile() -> dict[str, Any]:
    """conf/local.toml as data: every workload runs the profile a user runs."""
    with SHIPPED_PROFILE.open("rb") as f:
        return tomllib.load(f)


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stack_dir() -> Path:
    configured = os.environ.get("RELAY_STACK_DIR")
    return Path(configured) if configured else DEFAULT_STACK_DIR


def connect(url: str, autocommit: bool = True) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(url)
    conn.autocommit = autocommit
    return conn


def scalar(url: str, statement: str) -> int:
    """The one integer a statement returns, on a connection of its own."""
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def outbox_count(url: str) -> int:
    return scalar(url, "SELECT count(*) FROM kafka_messages")


def wait_empty(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while outbox_count(url) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the relay did not empty the outbox in time")
        time.sleep(0.5)


def with_database(url: str, database: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{database}"


@dataclass
class BenchEnv:
    """One bench run: the stack, a scratch directory, and what it created (to clean up)."""

    stack: StackInfo
    work: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    _databases: list[str] = field(default_factory=list)
    _admin: AdminClient | None = None

    @classmethod
    def start(cls) -> BenchEnv:
        info = outbox_relay.stack.up(stack_dir=stack_dir(), use_env=False)
        WORK_DIR.mkdir(parents=True, exist_ok=True)
        return cls(stack=info, work=WORK_DIR)

    # --- PostgreSQL -------------------------------------------------------------
    def fresh_database(self, label: str) -> str:
        """A new, migrated database; its URL."""
        name = f"b_{self.tag}_{label}".lower().replace("-", "_")[:60]
        conn = connect(self.stack.postgres_url)
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        self._databases.append(name)
        url = with_database(self.stack.postgres_url, name)
        db = Database(build_config({"postgres": {"url": url}}, env={}).postgres)
        try:
            migrate(db)
        finally:
            db.close()
        return url

    def stop_stack(self) -> None:
        """Stop the bench's PostgreSQL and Kafka: idle, they still take CPU from what runs next."""
        outbox_relay.stack.down(stack_dir=stack_dir())

    def drop_databases(self) -> None:
        conn = connect(self.stack.postgres_url)
        try:
            with conn.cursor() as cur:
                for name in self._databases:
                    cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            conn.close()
        self._databases.clear()

    def drop_database(self, url: str) -> None:
        name = url.rpartition("/")[2]
        conn = connect(self.stack.postgres_url)
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            conn.close()
        if name in self._databases:
            self._databases.remove(name)

    # --- Kafka ------------------------------------------------------------------
    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.stack.kafka_bootstrap})
        return self._admin

    def topic_names(self, label: str, count: int) -> list[str]:
        width = len(str(count - 1))
        return [f"bench.{self.tag}.{label}.t{i:0{width}d}" for i in range(count)]

    def create_topics(self, topics: Sequence[str], partitions: int) -> None:
        for chunk in _chunks(list(topics), 200):
            new = [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in chunk]
            for future in self.admin.create_topics(new, operation_timeout=60).values():
                future.result()
        # Metadata reaches every client a moment after creation.
        deadline = time.monotonic() + 30
        wanted = set(topics)
        while time.monotonic() < deadline:
            md = self.admin.list_topics(timeout=10)
            if wanted <= {t for t, m in md.topics.items() if m.error is None and m.partitions}:
                return
            time.sleep(0.2)
        raise RuntimeError("created topics did not show up in the metadata")

    def delete_topics(self, topics: Sequence[str]) -> None:
        for chunk in _chunks(list(topics), 200):
            for future in self.admin.delete_topics(chunk, operation_timeout=60).values():
                with contextlib.suppress(KafkaException):
                    future.result()

    def end_offsets(self, topics: Sequence[str], partitions: int) -> int:
        return OffsetWatch(self.admin, topics, partitions).sample()

    # --- the relay's configuration -----------------------------------------------
    def relay_config(self, url: str, label: str, **sections: dict[str, Any]) -> Config:
        """The shipped profile (conf/local.toml) for one run, with this run's addresses
        and a private ledger, checkpoint and metrics port; `sections` override (probes
        only: no workload sets a speed setting, issue 37)."""
        run_dir = self.work / f"{self.tag}-{label}"
        run_dir.mkdir(parents=True, exist_ok=True)
        data = shipped_profile()
        data.setdefault("postgres", {})["url"] = url
        data.setdefault("kafka", {})["bootstrap_servers"] = self.stack.kafka_bootstrap
        data.setdefault("ledger", {})["path"] = str(run_dir / "ledger")
        relay = data.setdefault("relay", {})
        relay.update(source_name=f"bench-{label}", checkpoint_path=str(run_dir / "checkpoint"))
        data.setdefault("metrics", {})["port"] = free_port()
        for section, values in sections.items():
            data.setdefault(section, {}).update(values)
        return build_config(data, env={})

    def run_dir(self, label: str) -> Path:
        path = self.work / f"{self.tag}-{label}"
        path.mkdir(parents=True, exist_ok=True)
        return path


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class OffsetWatch:
    """Samples the sum of the end offsets of some topics, in a thread or on demand.

    One ListOffsets request for all partitions, so watching 1,000 topics is cheap.
    """

    def __init__(
        self, admin: AdminClient, topics: Sequence[str], partitions: int, interval_s: float = 0.25
    ) -> None:
        self._admin = admin
        self._partitions = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        self._interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-offsets", daemon=True)

    def sample(self) -> int:
        request = {tp: OffsetSpec.latest() for tp in self._partitions}
        futures = self._admin.list_offsets(request, request_timeout=30)
        return sum(f.result().offset for f in futures.values())

    def _run(self) -> None:
        while not self._done.is_set():
            with contextlib.suppress(KafkaException):
                self.samples.append((time.time(), self.sample()))
            self._done.wait(self._interval_s)

    def start(self) -> OffsetWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.samples.append((time.time(), self.sample()))

    def first_at(self, threshold: int = 1) -> float | None:
        return next((t for t, n in self.samples if n >= threshold), None)

    def last_change_at(self) -> float | None:
        """When the count first reached its final value."""
        if not self.samples:
            return None
        final = self.samples[-1][1]
        return next((t for t, n in self.samples if n >= final), None)


class LockWatch:
    """When the contender took its first topic lock: the start of its first batch.

    Start-up is launch to first lock; the drain runs from first lock to the last record.
    """

    def __init__(self, url: str, interval_s: float = 0.1) -> None:
        self._url = url
        self._interval_s = interval_s
        self.first_lock_at: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-locks", daemon=True)

    def _run(self) -> None:
        conn = connect(self._url)
        try:
            with conn.cursor() as cur:
                while not self._done.is_set():
                    cur.execute("SELECT 1 FROM kafka_topic_info WHERE locked_by IS NOT NULL "
                                "LIMIT 1")
                    if cur.fetchone() is not None:
                        self.first_lock_at = time.time()
                        return
                    self._done.wait(self._interval_s)
        finally:
            conn.close()

    def start(self) -> LockWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
