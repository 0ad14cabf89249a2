"""Renews the topic locks while a long write runs, and dies with the Spark application."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection
from types import TracebackType

from relay.control.locks import TopicLocks
from relay.errors import RelayError

log = logging.getLogger(__name__)


class Heartbeat:
    """A context manager: a daemon thread renews `topics` every `interval_s` seconds.

    It stops renewing as soon as the JVM stops answering (`jvm_alive`) or the process
    that started this driver is gone, so an orphaned Python driver lets its locks expire.
    """

    def __init__(
        self,
        locks: TopicLocks,
        topics: Collection[str],
        interval_s: float,
        jvm_alive: Callable[[], bool],
    ) -> None:
        self._locks = locks
        self._topics = set(topics)
        self._interval_s = interval_s
        self._jvm_alive = jvm_alive
        self._parent = os.getppid()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-heartbeat", daemon=True)
        self.lost: set[str] = set()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join(timeout=self._interval_s + 5)

    def _orphaned(self) -> bool:
        return os.getppid() != self._parent or not self._jvm_alive()

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            if self._orphaned():
                log.error("heartbeat: the Spark application is gone; letting locks expire")
                return
            try:
                held = self._locks.heartbeat(self._topics)
            except RelayError as exc:
                log.warning("heartbeat failed, will retry: %s", exc)
                continue
            newly_lost = self._topics - held - self.lost
            if newly_lost:
                log.warning(
                    "lock lost for topics %s; their rows will not be deleted", sorted(newly_lost)
                )
                self.lost |= newly_lost
