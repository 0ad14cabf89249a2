"""What the relays remember of each topic's Kafka metadata, in kafka_topic_info.

In the database rather than in one relay's memory: a partition count changed while no
relay ran is still noticed by the next one, and the grace of a missing topic is measured
on one clock (the database's) by every relay that shares the outbox.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from outbox_relay.control.db import Database

# Stores the counts that changed (and forgets that a topic now seen was missing). The
# self-joined `before` is read from the statement's snapshot, so it holds the count
# stored until now. Unchanged rows are neither written nor returned.
NOTE_PRESENT = """
UPDATE kafka_topic_info AS t
SET partition_count = seen.partitions, missing_since = NULL
FROM unnest(%(topics)s::varchar[], %(counts)s::integer[]) AS seen(topic, partitions),
     kafka_topic_info AS before
WHERE t.topic = seen.topic AND before.id = t.id
  AND (t.partition_count IS DISTINCT FROM seen.partitions OR t.missing_since IS NOT NULL)
RETURNING t.topic, before.partition_count AS before, seen.partitions AS after
"""

# The first sight of a topic as missing starts its clock; later sights read it.
NOTE_MISSING = """
UPDATE kafka_topic_info
SET missing_since = coalesce(missing_since, now() AT TIME ZONE 'UTC')
WHERE topic = ANY(%s::varchar[])
RETURNING topic, extract(epoch FROM now() AT TIME ZONE 'UTC' - missing_since) AS seconds
"""


@dataclass(frozen=True)
class PartitionChange:
    topic: str
    before: int
    after: int


class TopicMeta:
    def __init__(self, db: Database) -> None:
        self.db = db

    def note_present(self, counts: Mapping[str, int]) -> list[PartitionChange]:
        """Store each topic's partition count; returns the counts that changed since
        the last one stored (a first count ever is no change)."""
        if not counts:
            return []
        topics = sorted(counts)
        rows = self.db.all(NOTE_PRESENT, {"topics": topics,
                                          "counts": [counts[t] for t in topics]})
        return [PartitionChange(r["topic"], r["before"], r["after"])
                for r in sorted(rows, key=lambda r: r["topic"])
                if r["before"] is not None and r["before"] != r["after"]]

    def note_missing(self, topics: Collection[str]) -> dict[str, float]:
        """How many seconds each topic has been reported missing, this report included."""
        if not topics:
            return {}
        rows = self.db.all(NOTE_MISSING, (sorted(topics),))
        return {r["topic"]: float(r["seconds"]) for r in rows}
