"""Kafka's rule for a legal topic name, without a Kafka client.

The relay's driver (outbox_relay.control.kafka_admin) and the application-side publisher
(outbox_relay.outbox.publisher) both refuse names Kafka would refuse; the publisher must not import
a Kafka client, so the rule lives here, with nothing to import.

SQL twin: none; the database takes any topic a row names, and the driver refuses an illegal
one before it asks Kafka (outbox_relay.control.kafka_admin).
tests/integration/test_rules_contract.py shows the database keeps such a row unsent while the rule
names it illegal.
"""

from __future__ import annotations

import re

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def topic_name_problem(topic: str) -> str | None:
    """Why Kafka would refuse this topic name, or None if it is legal."""
    if topic in (".", ".."):
        return f"topic name {topic!r} is not allowed"
    # fullmatch, not match with $: `$` also matches before a trailing newline.
    if not _LEGAL_TOPIC.fullmatch(topic):
        return (
            f"topic name {topic!r} is illegal: Kafka allows 1-249 characters "
            "of ASCII letters, digits, '.', '_' and '-'"
        )
    return None
