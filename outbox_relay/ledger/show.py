"""The lines `outbox-relay ledger show` prints: one per ledger record of a message."""

from __future__ import annotations

from datetime import datetime

from outbox_relay.ledger.lookup import LedgerRecord
from outbox_relay.rules.outcomes import SENT

WHERE = {"staging": "staged, not yet copied to Delta", "delta": "in the Delta ledger"}


def when(at: datetime | None) -> str:
    return "an unrecorded time" if at is None else at.strftime("%Y-%m-%d %H:%M:%S.%f %Z").strip()


def partition_text(record: LedgerRecord) -> str:
    """Where Kafka put the message, as far as the ledger knows."""
    if record.outcome not in SENT:
        return "not sent to Kafka"
    if not record.partition_known:
        return "partition unknown (this ledger does not record partitions)"
    if record.kafka_partition is None:
        return "partition chosen by the producer (keyless)"
    return f"partition {record.kafka_partition} of {record.topic_partitions}"


def describe(record: LedgerRecord) -> str:
    by = record.actor or record.source
    return (
        f"message {record.message_id} of topic {record.topic!r}: {record.outcome} "
        f"at {when(record.relayed_at)} in session {record.session_id} by {by}, "
        f"{partition_text(record)} ({WHERE.get(record.where, record.where)})"
    )


def not_found(message_id: int, topic: str | None) -> str:
    of = f"of topic {topic!r}" if topic is not None else "of any topic"
    return f"message {message_id} {of}: no record in the ledger (not relayed, or not yet)"
