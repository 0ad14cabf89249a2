"""Renews the topic locks over a whole batch body, and dies with the Spark application."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection
from types import TracebackType

from outbox_relay.control.locks import TopicLocks
from outbox_relay.errors import RelayError

log = logging.getLogger(__name__)

# How long stop() waits for a renewal in flight; past it, the batch goes on, and the
# renewal keeps its connection (TopicLocks.beating) until its statement ends.
_JOIN_GRACE_S = 5.0


class Heartbeat:
    """A context manager: a daemon thread renews `topics` every `interval_s` seconds.

    A topic whose lock is found taken or lapsed is reported once, from the heartbeat
    thread, to `on_lost`, so a write in flight for it can be cancelled within one interval.
    It stops renewing as soon as the JVM stops answering (`jvm_alive`) or the process
    that started this driver is gone, so an orphaned Python driver lets its locks expire.
    """

    def __init__(
        self,
        locks: TopicLocks,
        topics: Collection[str],
        interval_s: float,
        jvm_alive: Callable[[], bool],
        on_lost: Callable[[set[str]], None],
    ) -> None:
        self._locks = locks
        self._topics = set(topics)
        self._interval_s = interval_s
        self._jvm_alive = jvm_alive
        self._on_lost = on_lost
        self._parent = os.getppid()
        self._done = threading.Event()
        # Held while a loss is recorded and reported: stop() takes it, so no report
        # follows stop() (after it, the release makes every topic look lost).
        self._report = threading.Lock()
        self._lost: set[str] = set()
        self._waited = False
        self._thread = threading.Thread(target=self._run, name="relay-heartbeat", daemon=True)

    @property
    def lost(self) -> frozenset[str]:
        """The topics found lost so far; the batch body does no more work for them."""
        with self._report:
            return frozenset(self._lost)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop renewing. Returns once no loss can be reported any more."""
        with self._report:
            self._done.set()
        self._thread.join(timeout=self._interval_s + _JOIN_GRACE_S)
        if self._thread.is_alive():
            log.warning("heartbeat: stopped with its renewal still running; the next "
                        "heartbeat on its connection waits for it")

    def _orphaned(self) -> bool:
        return os.getppid() != self._parent or not self._jvm_alive()

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            if self._orphaned():
                log.error("heartbeat: the Spark application is gone; letting locks expire")
                return
            renewing = self._topics - self.lost
            if not renewing:
                return
            # A psycopg2 connection runs one statement at a time: the renewal of an
            # earlier heartbeat that outlived its stop() may still hold this one.
            if not self._locks.beating.acquire(blocking=False):
                if not self._waited:
                    log.warning("heartbeat: an earlier renewal is still inside its statement"
                                " on this connection; renewing once it ends")
                    self._waited = True
                continue
            try:
                held = self._locks.heartbeat(renewing)
            except RelayError as exc:
                log.warning("heartbeat failed, will retry: %s", exc)
                continue
            finally:
                self._locks.beating.release()
            with self._report:
                newly_lost = renewing - held
                if self._done.is_set() or not newly_lost:
                    continue
                log.warning("lock lost for topics %s: no more work on them in this batch",
                            sorted(newly_lost))
                self._lost |= newly_lost
                self._on_lost(set(newly_lost))
