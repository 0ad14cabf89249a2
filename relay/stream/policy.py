"""Per-topic rules: the first rule whose regex fully matches a topic decides."""

from __future__ import annotations

import re

from relay.config import TopicRule

DEFAULT_RULE = TopicRule(match=".*")


def rule_for(rules: list[TopicRule], topic: str) -> TopicRule:
    for rule in rules:
        if re.fullmatch(rule.match, topic):
            return rule
    return DEFAULT_RULE
