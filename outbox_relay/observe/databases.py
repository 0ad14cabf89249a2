"""The runtime metrics of a relay of several databases, in one exposition.

Each database's relay counts into a registry of its own (outbox_relay.observe.runtime,
built again when its relay is); this collector shows them all, every series with a
`database` label. The first `metrics.max_label_databases` databases keep a label of their
own, under the topic label's rule (outbox_relay.observe.labels: first seen, kept for the
process's life); the rest share database="(other)" (a database's name is a slug, so none
collides with it), where counters and histograms are summed and any other value is the
highest of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from outbox_relay.observe.labels import TopicLabels

DATABASE_LABEL = "database"
_ADDED = ("counter", "histogram", "summary")


class DatabaseMetrics(Collector):
    def __init__(self, max_labels: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._labels = TopicLabels(max_labels)
        self._sources: dict[str, CollectorRegistry] = {}
        self._guard = threading.Lock()
        self.registry.register(self)

    def add(self, database: str, registry: CollectorRegistry) -> None:
        """`database`'s registry from now on (a relay built again replaces its own)."""
        with self._guard:
            self._sources[database] = registry

    def remove(self, database: str) -> None:
        """`database` is shown no more; its label, if it had one of its own, stays its."""
        with self._guard:
            self._sources.pop(database, None)

    def collect(self) -> Iterator[Metric]:
        with self._guard:
            sources = sorted(self._sources.items())
        families: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
        for database, registry in sources:
            label = self._labels(database)
            for family in registry.collect():
                merged = families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type,
                                        family.unit))
                kept = values.setdefault(family.name, {})
                for sample in family.samples:
                    labels = {**sample.labels, DATABASE_LABEL: label}
                    key = (sample.name, tuple(sorted(labels.items())))
                    before = kept.get(key)
                    value = sample.value if before is None else _combine(
                        family.type, sample.name, before.value, sample.value)
                    kept[key] = Sample(sample.name, labels, value, sample.timestamp,
                                       sample.exemplar)
        for name, merged in families.items():
            merged.samples = list(values[name].values())
            yield merged


def _combine(kind: str, sample: str, before: float, value: float) -> float:
    """Two databases' values of one series under the shared label."""
    if kind in _ADDED and not sample.endswith("_created"):
        return before + value
    return max(before, value)
