"""Per-topic rules: the first rule whose regex fully matches a topic decides.

SQL twin: none; the driver (outbox_relay.stream) resolves a topic's rule here and passes its
values (allowance, policy) to SQL as parameters, and the data plane (outbox_relay.data.plan) asks
the same lookup, so both planes see one rule per topic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from outbox_relay.config import TopicRule

DEFAULT_RULE = TopicRule(match=".*")


def rule_for(rules: Sequence[TopicRule], topic: str) -> TopicRule:
    for rule in rules:
        if re.fullmatch(rule.match, topic):
            return rule
    return DEFAULT_RULE
