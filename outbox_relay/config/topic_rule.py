"""The per-topic rule of a profile (`[[relay.topic_rules]]`); the lookup of a topic's
rule is outbox_relay.rules.topic_rules.rule_for."""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationInfo, field_validator

from outbox_relay.config.base import StrictModel
from outbox_relay.config.checks import check_event_type, check_regex, check_transform_spec


class TopicRule(StrictModel):
    """Per-topic behaviour, chosen by the first rule whose regex fully matches the topic."""

    match: str
    compact: bool = False
    policy: Literal["block", "park"] = "block"
    # "package.module:function", a DataFrame -> DataFrame function (outbox_relay.data.transform).
    transform: str | None = None
    # CloudEvents on the wire (outbox_relay.rules.cloudevents): the relay writes the Kafka
    # binding's binary-mode attributes on each record of the topic; `event_type` is the
    # ce_type of a row whose headers carry none (without it, such a row is a problem).
    cloudevents: bool = False
    event_type: str | None = None

    @field_validator("match")
    @classmethod
    def _valid_regex(cls, value: str) -> str:
        return check_regex(value)

    @field_validator("transform")
    @classmethod
    def _valid_transform(cls, value: str | None) -> str | None:
        return None if value is None else check_transform_spec(value)

    @field_validator("event_type")
    @classmethod
    def _event_type_needs_cloudevents(cls, value: str | None,
                                      info: ValidationInfo) -> str | None:
        # `cloudevents` is declared first, so it is validated (or missing) by now.
        return check_event_type(value, bool(info.data.get("cloudevents", False)))
