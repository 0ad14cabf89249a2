"""What a relay's rounds did, counted by both lanes' threads (outbox_relay.stream.lanes)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from outbox_relay.rules.outcomes import Outcome


@dataclass
class RelayStats:
    """Per topic: messages published, compacted and parked, and the last error of a
    topic that has not succeeded since. Read a snapshot while rounds run."""

    published: Counter[str] = field(default_factory=Counter)
    compacted: Counter[str] = field(default_factory=Counter)
    parked: Counter[str] = field(default_factory=Counter)
    errors: dict[str, str] = field(default_factory=dict)
    batches: int = 0
    # Messages published by each lane of the data plane: "direct" (the driver's producer)
    # and "spark" (the executors' sink).
    lanes: Counter[str] = field(default_factory=Counter)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False,
                                   compare=False)

    def add(self, topic: str, outcome: Outcome, n: int) -> None:
        """`outcome`: one of RELAY_OUTCOMES (outbox_relay.rules.outcomes), a counter of its name."""
        with self._guard:
            getattr(self, outcome)[topic] += n

    def add_lane(self, lane: str, n: int) -> None:
        with self._guard:
            self.lanes[lane] += n

    def add_batch(self) -> None:
        with self._guard:
            self.batches += 1

    def note_errors(self, errors: Mapping[str, str], cleared: Collection[str]) -> None:
        """A round's errors, and the topics it finished without one."""
        with self._guard:
            self.errors.update(errors)
            for topic in cleared:
                self.errors.pop(topic, None)

    def snapshot(self) -> RelayStats:
        with self._guard:
            return RelayStats(Counter(self.published), Counter(self.compacted),
                              Counter(self.parked), dict(self.errors), self.batches,
                              Counter(self.lanes))
