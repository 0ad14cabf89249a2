"""Database-side Prometheus metrics, from the same snapshot as `status`.

A custom collector: every scrape reads the database once (no Delta: none of these needs
it). Per-topic series are capped by outbox_relay.observe.labels, the rule the runtime counters
follow too: the first N topics seen keep their label for the exporter's life, the rest
are folded into `topic="(other)"` (counts summed, ages and retries the maximum, states
counted). Labels hold topic names and states only; no value or label holds a secret.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from outbox_relay.config import DEFAULT_TOP_TOPICS
from outbox_relay.control.db import Database
from outbox_relay.errors import RelayError
from outbox_relay.observe import OTHER_TOPICS
from outbox_relay.observe.labels import TopicLabels
from outbox_relay.observe.status import STATES, Snapshot, TopicStatus, take_snapshot

log = logging.getLogger(__name__)

PREFIX = "outbox_relay_"
# Yielded by every scrape, beside the snapshot's families when the database was read.
DATABASE_UP = "database_up"


@dataclass(frozen=True)
class TopicSeries:
    """One topic label's values: a topic, or the aggregate of the topics past the cap."""

    label: str
    backlog: int
    oldest_age_s: float
    max_wait_s: float
    retries: int
    parked: int
    states: dict[str, int]


def _one(t: TopicStatus) -> TopicSeries:
    return TopicSeries(t.topic, t.backlog, t.oldest_age_s or 0.0, t.max_wait_s, t.retries,
                       t.parked, {s: int(s == t.state) for s in STATES})


def capped(topics: Sequence[TopicStatus], labels: TopicLabels) -> list[TopicSeries]:
    """One series per topic that keeps its label, in name order, then `other` for the
    rest (its aggregate), when there is a rest."""
    label = labels.of_all(t.topic for t in topics)
    ordered = sorted(topics, key=lambda t: t.topic)
    series = [_one(t) for t in ordered if label[t.topic] != OTHER_TOPICS]
    rest = [t for t in ordered if label[t.topic] == OTHER_TOPICS]
    if rest:
        series.append(TopicSeries(
            OTHER_TOPICS,
            backlog=sum(t.backlog for t in rest),
            oldest_age_s=max(t.oldest_age_s or 0.0 for t in rest),
            max_wait_s=max(t.max_wait_s for t in rest),
            retries=max(t.retries for t in rest),
            parked=sum(t.parked for t in rest),
            states={s: sum(t.state == s for t in rest) for s in STATES},
        ))
    return series


def _gauge(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))


def families(snapshot: Snapshot, labels: TopicLabels, duration_s: float) -> list[Metric]:
    """Every metric family of one snapshot (pure but for `labels`, which remembers the
    topics given a label: the unit tests call it directly)."""
    series = capped(snapshot.topics, labels)
    per_topic = {
        "backlog_messages": ("Messages waiting in the outbox (estimated past the exact "
                             "count's limit; see `outbox-relay status`)", "backlog"),
        "oldest_message_age_seconds": ("Age of the topic's oldest waiting message (its "
                                       "lowest id), 0 when none waits", "oldest_age_s"),
        "max_wait_seconds": ("Deimos's max-wait: since the later of the last processing "
                             "and the oldest waiting message, 0 when none waits",
                             "max_wait_s"),
        "topic_retries": ("Failed attempts since the topic last succeeded", "retries"),
        "parked_messages": ("Messages in the dead-letter table", "parked"),
    }
    out: list[Metric] = []
    for name, (doc, attr) in per_topic.items():
        family = _gauge(name, doc, ["topic"])
        for s in series:
            family.add_metric([s.label], float(getattr(s, attr)))
        out.append(family)
    state = _gauge("topic_state", "1 for the topic's current state (ready, locked, "
                   "backoff), else 0; for `other`, the topics in that state", ["topic", "state"])
    counts = _gauge("topics", "Topics listed by status, by state", ["state"])
    for s in series:
        for name in STATES:
            state.add_metric([s.label, name], s.states[name])
    for name in STATES:
        counts.add_metric([name], sum(t.state == name for t in snapshot.topics))
    out += [state, counts, *_whole(snapshot, duration_s)]
    return out


def _whole(snapshot: Snapshot, duration_s: float) -> Iterator[Metric]:
    led, h, q = snapshot.ledger, snapshot.horizon, snapshot.queue_table
    values = {
        "ledger_staged_records": ("Ledger records staged in PostgreSQL, not yet in Delta",
                                  led.staged_records),
        "ledger_staged_messages": ("Messages of the staged ledger records",
                                   led.staged_messages),
        "ledger_oldest_staged_age_seconds": ("Age of the oldest staged ledger record, 0 "
                                             "when none", led.oldest_staged_age_s or 0.0),
        "horizon_age_seconds": ("Age of the oldest transaction holding this database's "
                                "xmin horizon back, 0 when none (or a replication slot)",
                                (h.age_s or 0.0) if h else 0.0),
        "horizon_age_transactions": ("Transaction ids since the horizon's holder",
                                     (h.xid_age or 0) if h else 0),
        "status_duration_seconds": ("How long reading this snapshot took", duration_s),
    }
    if q:
        values["queue_dead_tuples"] = ("kafka_messages' dead tuples", q.dead_tuples)
        values["queue_live_tuples"] = ("kafka_messages' live tuples", q.live_tuples)
        if q.last_autovacuum:
            values["queue_last_autovacuum_timestamp_seconds"] = (
                "When autovacuum last finished on kafka_messages", q.last_autovacuum.timestamp())
    for name, (doc, value) in values.items():
        family = _gauge(name, doc)
        family.add_metric([], float(value))
        yield family


class StatusCollector(Collector):
    """Reads a snapshot per scrape; a scrape that can't reach the database says so in
    `outbox_relay_database_up` instead of failing the whole scrape."""

    def __init__(self, db: Database, lock_timeout_s: float, ledger_path: str,
                 max_label_topics: int = DEFAULT_TOP_TOPICS) -> None:
        self._db = db
        self._lock_timeout_s = lock_timeout_s
        self._ledger_path = ledger_path
        self._labels = TopicLabels(max_label_topics)
        self._mutex = threading.Lock()  # one connection; the HTTP server is threaded

    def collect(self) -> Iterator[Metric]:
        up = _gauge(DATABASE_UP, "1 if the last scrape read the outbox database")
        started = time.monotonic()
        try:
            with self._mutex:
                snapshot = take_snapshot(self._db, self._lock_timeout_s, self._ledger_path,
                                         with_rates=False)
        except RelayError as exc:
            log.warning("metrics: cannot read the outbox: %s", exc)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from families(snapshot, self._labels, time.monotonic() - started)
