"""What became of a message that left the outbox: the ledger's outcomes, one definition.

SQL twin: the CHECK constraints of relay_ledger_staging (schemas 0006, 0012); every
statement that stages a record takes its outcome as a parameter from here.
tests/integration/test_outcome_values.py reads the constraints back from the database and
pins them to this type; tests/unit/test_outcome_literals.py keeps outbox_relay/ from spelling one.
A str enum: psycopg2, Prometheus labels and f-strings see the plain value.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    PUBLISHED = "published"  # acknowledged by Kafka, deleted from the outbox
    PARKED = "parked"  # moved to relay_parked_messages, not sent
    # Not sent: a newer row of its key was in its claim, and when its session ended a newer
    # row of its partitioning key was acknowledged or may have been appended
    # (docs/design.md, "Compaction").
    COMPACTED = "compacted"
    SKIPPED = "skipped"  # removed unsent by an operator (`outbox-relay skip`)
    DROPPED = "dropped"  # a parked message an operator dropped


# The relay's own outcomes, which its rounds count and export as metrics.
RELAY_OUTCOMES = (Outcome.PUBLISHED, Outcome.PARKED, Outcome.COMPACTED)
# An operator's outcomes, which always name who (the actor).
OPERATOR_OUTCOMES = (Outcome.SKIPPED, Outcome.DROPPED)
# Outcomes under which the message went to Kafka; the others never reached a partition.
SENT = frozenset({Outcome.PUBLISHED})
