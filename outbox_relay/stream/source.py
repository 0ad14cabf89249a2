"""The streaming source: a Python data source that polls kafka_messages for ready topics.

It carries no data. Its offset is a tick that advances only when some topic is ready,
so Spark runs a micro-batch exactly when there is work, and foreachBatch does the
rest on the driver. Its methods run in a long-lived Python worker that the JVM starts,
which shares no memory with foreachBatch; it has its own connection.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from outbox_relay.config.load import from_json_without_secrets
from outbox_relay.control.db import Database
from outbox_relay.control.pending import (
    SOURCE_APPLICATION,
    TopicFilter,
    max_id,
    pending_topics,
    ready_topics,
)
from outbox_relay.errors import RelayError

log = logging.getLogger(__name__)

SOURCE_NAME = "outbox"
# Long sleeps here would hold up a graceful stop, which waits for the stream thread.
_MAX_WAIT_S = 2.0


def _ignore_stop_signals() -> None:
    """A TERM to the process group must stop the relay gracefully, not kill this worker
    under the query (the JVM ends the worker itself when the query stops)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the worker's main thread: nothing to protect
            return


class OutboxSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return "tick BIGINT"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OutboxStreamReader(self.options)


class OutboxStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, Any]) -> None:
        _ignore_stop_signals()
        self._options = dict(options)
        self._config = from_json_without_secrets(options["config"])
        relay = self._config.relay
        self._poll_s = relay.poll_interval_s
        self._filter = TopicFilter(relay.include_topics, relay.exclude_topics)
        self._db = Database(self._config.postgres, SOURCE_APPLICATION)
        self._last_poll = 0.0
        self._bound: int | None = None
        self._deadline: float | None = None
        self._polled = False

    def initialOffset(self) -> dict[str, int]:
        return {"tick": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        # "What exists" is fixed once, by the runner at the run's start (the "bound"
        # option), so that this poll and the batch bodies agree on when the drain is done:
        # a bound read here, later, counted the rows written meanwhile, and each of them
        # then started a micro-batch of its own. Later rows never keep a drain running.
        given = self._options.get("bound")
        self._bound = int(given) if given is not None else max_id(self._db)
        self._deadline = time.monotonic() + self._config.relay.available_now_deadline_s

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        wait = self._poll_s - (time.monotonic() - self._last_poll)
        if wait > 0:
            time.sleep(wait)  # Spark asks ~50 times a second when idle
        self._last_poll = time.monotonic()
        try:
            work = self._work_waiting()
        except RelayError as exc:
            log.warning("outbox poll failed, will retry: %s", exc)
            work = self._retry_failed_poll()
        if not self._polled and self._deadline is None:
            # Continuous: the first batch body starts at once and keeps polling (its
            # rounds do, outbox_relay.stream.batch), so the first messages after a start wait
            # for one poll, not for Spark to plan a micro-batch once they are seen. The
            # poll above still ran: its connection is how other relays count this one
            # (outbox_relay.control.pending.RELAYS_POLLING).
            self._polled = True
            work = True
        return {"tick": start["tick"] + 1} if work else start

    def _retry_failed_poll(self) -> bool:
        """Whether to report work after a failed poll, so that an available-now query
        polls again instead of ending: "no work" ends it, and a failed poll says nothing
        about the outbox. Only the deadline ends a drain then (the runner, unable to read
        what is left either, exits NOT_VERIFIED). Continuous mode simply polls again."""
        if self._deadline is None:
            return False
        left = self._deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, _MAX_WAIT_S, max(self._poll_s, 0.5)))
        return True

    def _work_waiting(self) -> bool:
        states = pending_topics(
            self._db, self._config.relay.lock_timeout_s, self._filter, self._bound
        )
        if self._deadline is None:
            return bool(ready_topics(states))
        if ready_topics(states, self._bound):
            return True
        relevant = [s for s in states if s.below_bound]
        left = self._deadline - time.monotonic()
        waiting = [s for s in relevant if s.state == "locked" or s.retry_in_s < left]
        if not waiting or left <= 0:
            return False
        # Topics in backoff or locked elsewhere: wait a little, then let a batch try.
        time.sleep(min(left, _MAX_WAIT_S, max(self._poll_s, min(s.retry_in_s for s in waiting))))
        return True

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        return iter(())

    def commit(self, end: dict[str, int]) -> None:
        # Rows are never deleted here: commit(N-1) only runs when batch N is planned.
        return None

    def stop(self) -> None:
        self._db.close()
