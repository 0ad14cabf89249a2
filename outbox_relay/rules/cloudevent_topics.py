"""What a CloudEvents topic (a topic rule with `cloudevents = true`) asks of its rows.

The header names and the bytes the relay adds live in outbox_relay.rules.cloudevents; this
module holds the per-topic rules built on them:

- `allowance`: the claim's payload allowance of a CloudEvents topic is the plain one
  (record_size.payload_allowance) less the headers the relay adds, floored at 0. The
  record's size depends on the payload and the header bytes only through their sum, so
  the subtraction is exact, not an estimate.
- `message_problem`: a row of a CloudEvents topic needs a `ce_type` (its own, or the
  rule's default `event_type`), and may not carry a header the relay writes there.

SQL twin: `relay_message_problem`'s eleven-argument form and `relay_message_may_fail`'s
seven-argument form (outbox_relay/schemas/0016_cloudevents_check.sql), given the two flags of
`TopicFlags`; tests/integration/test_cloudevents_contract.py pins them together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from outbox_relay.config import TopicRule
from outbox_relay.rules import cloudevents as ce
from outbox_relay.rules.topic_rules import rule_for


@dataclass(frozen=True)
class TopicFlags:
    """The per-topic flags the claim passes to SQL."""

    cloudevents: bool = False
    type_required: bool = False  # a CloudEvents topic whose rule gives no default type

    @classmethod
    def of(cls, rule: TopicRule) -> TopicFlags:
        return cls(rule.cloudevents, rule.cloudevents and rule.event_type is None)


PLAIN = TopicFlags()  # a topic without CloudEvents


def sql_arrays(flags: Sequence[TopicFlags]) -> dict[str, list[bool]]:
    """The flags of a claim's topics as the SQL arrays of the claim and the park."""
    return {"cloudevents": [f.cloudevents for f in flags],
            "type_required": [f.type_required for f in flags]}


def default_types(rules: Sequence[TopicRule], topics: Iterable[str]) -> dict[str, str | None]:
    """The CloudEvents topics among `topics`, each with its rule's default ce_type (None:
    the row's own only): what the records of those topics carry (outbox_relay.data.records,
    outbox_relay.direct.records)."""
    found = {t: rule_for(rules, t) for t in topics}
    return {t: rule.event_type for t, rule in found.items() if rule.cloudevents}


def allowance(plain: int, source_name: str, rule: TopicRule) -> int:
    """The payload allowance of a topic under `rule`, from its plain allowance."""
    if not rule.cloudevents:
        return plain
    return max(0, plain - ce.added_header_bytes(source_name, rule.event_type))


def missing_type_problem() -> str:
    return (f"message has no {ce.CE_TYPE} header (publish it with event_type=) and its "
            "CloudEvents topic rule gives no event_type")


def relay_attribute_problem(name: str) -> str:
    return f"header {name} is written by the relay on a CloudEvents topic"


def message_problem(headers: Mapping[str, object] | None, flags: TopicFlags) -> str | None:
    """The CloudEvents problem of a row whose user headers are `headers` (an object of
    string values: the shape checks come first, in relay_message_problem's other forms)."""
    if not flags.cloudevents:
        return None
    own = headers or {}
    taken = [n for n in ce.RELAY_ATTRIBUTES if n in own]
    if taken:
        return relay_attribute_problem(taken[0])
    if own.get(ce.CE_TYPE) == "":
        return f"header {ce.CE_TYPE} is empty"
    if flags.type_required and ce.CE_TYPE not in own:
        return missing_type_problem()
    return None
