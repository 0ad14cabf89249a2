"""What a round does with a topic whose write failed, once the failing message is known:
the same for both lanes (outbox_relay.stream.spark_lane, outbox_relay.stream.direct_lane).

The acknowledged prefix stays in the session (and is deleted by the round's finish); a
culprit refused for good is parked (policy `park`) or blocks its topic with its id in
the reason (`block`); anything else backs the topic off. A culprit refused for good was
certainly never appended: what the session withholds behind it alone may still go
(outbox_relay.control.withheld).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field, replace

from outbox_relay.config import TopicRule
from outbox_relay.control.claims import Claim, Claims
from outbox_relay.control.kafka_admin import KafkaAdmin
from outbox_relay.control.parking import Parking
from outbox_relay.errors import UnreachableError
from outbox_relay.rules.topic_rules import rule_for
from outbox_relay.stream.failures import OUTAGE_PREFIX
from outbox_relay.stream.isolate import Isolation

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    acknowledged: list[Claim] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    parked: Counter[str] = field(default_factory=Counter)
    # Which lane wrote each acknowledged topic: "direct" or "spark".
    lanes: dict[str, str] = field(default_factory=dict)


def outage(admin: KafkaAdmin, reason: str) -> str | None:
    """Why Kafka counts as down after the write failure `reason`, if it is down."""
    try:
        admin.check_reachable()
    except UnreachableError as down:
        return f"{OUTAGE_PREFIX}{down}"
    return None


class Settlement:
    def __init__(self, claims: Claims, parking: Parking, topic_rules: list[TopicRule]) -> None:
        self._claims = claims
        self._parking = parking
        self._topic_rules = topic_rules

    def sent_ids(self, claim: Claim) -> list[int]:
        assert claim.session_id is not None
        return self._claims.sent_ids(claim.session_id)

    def settle(self, claim: Claim, result: Isolation, outcome: Outcome) -> None:
        """Records what isolation found for `claim`'s session in `outcome`."""
        assert claim.session_id is not None
        culprit = result.culprit if result.poison else None
        if result.delivered or culprit is not None:
            freed = self._claims.isolated(claim.session_id, result.delivered, culprit)
            if freed:
                log.info("topic %s: %d withheld message(s) go again, their successor %s "
                         "never reached Kafka", claim.topic, freed, culprit)
        if result.delivered:
            outcome.acknowledged.append(replace(claim, rows=len(result.delivered)))
        if not result.poison or result.culprit is None:
            outcome.errors[claim.topic] = result.reason
            return
        rule = rule_for(self._topic_rules, claim.topic)
        where = f"message {result.culprit}: {result.reason} (found in {result.attempts} sends)"
        if rule.policy == "park":
            parked = self._parking.park_one(result.culprit, result.reason, result.attempts)
            outcome.parked[claim.topic] += len(parked)
            log.warning("topic %s: parked %s", claim.topic, where)
        else:
            outcome.errors[claim.topic] = where
