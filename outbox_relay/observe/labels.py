"""The one rule that caps the `topic` label, for the runtime counters and the
database-side gauges alike.

A topic gets a label of its own the first time it is seen, while fewer than `limit`
topics have one; every later topic shares OTHER_TOPICS. A label once given is kept for
the life of the process. Ranking by volume or backlog would move a topic in and out of
the cap from one scrape to the next: its series would break off and restart, and a
counter's rate() with it. The exporter sees a snapshot's topics in name order, so two
exporters started on the same outbox give the same labels.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from outbox_relay.observe import OTHER_TOPICS


class TopicLabels:
    """`label(topic)`: the topic itself or OTHER_TOPICS, under the rule above."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._own: set[str] = set()
        self._guard = threading.Lock()

    def __call__(self, topic: str) -> str:
        if topic in self._own:  # no lock: set membership is atomic, and the set only grows
            return topic
        if topic == OTHER_TOPICS:  # an outbox row may name it; it must not take a slot
            return OTHER_TOPICS
        with self._guard:
            if topic in self._own or len(self._own) < self._limit:
                self._own.add(topic)
                return topic
        return OTHER_TOPICS

    def of_all(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's label, new topics taken in name order (a snapshot's order must not
        decide which of them keep a label)."""
        return {t: self(t) for t in sorted(set(topics))}
