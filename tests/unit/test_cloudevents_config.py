"""The CloudEvents options of a topic rule: `cloudevents` and its default `event_type`."""

from __future__ import annotations

import pytest

from outbox_relay.config.load import build_config
from outbox_relay.errors import ConfigError
from outbox_relay.rules.cloudevent_topics import TopicFlags


def _rules(*rules: dict[str, object]) -> dict[str, object]:
    return {"relay": {"topic_rules": list(rules)}}


@pytest.mark.parametrize(("rule", "key", "says"), [
    ({"match": "a", "event_type": "com.example.x"}, "relay.topic_rules.0.event_type",
     "needs cloudevents = true"),
    ({"match": "a", "cloudevents": False, "event_type": "x"}, "relay.topic_rules.0.event_type",
     "needs cloudevents = true"),
    ({"match": "a", "cloudevents": True, "event_type": ""}, "relay.topic_rules.0.event_type",
     "non-empty"),
    ({"match": "a", "cloudevents": True, "event_type": "  "}, "relay.topic_rules.0.event_type",
     "non-empty"),
    ({"match": "a", "cloudevents": True, "event_type": 7}, "relay.topic_rules.0.event_type",
     "string"),
    ({"match": "a", "cloudevents": "yes please"}, "relay.topic_rules.0.cloudevents", "boolean"),
])
def test_an_invalid_cloudevents_option_names_its_key(
    rule: dict[str, object], key: str, says: str,
) -> None:
    with pytest.raises(ConfigError) as err:
        build_config(_rules(rule), env={})
    assert f"invalid config key {key}:" in str(err.value)
    assert says in str(err.value)
    assert err.value.exit_code == 2


def test_the_options_and_the_flags_the_claim_gets() -> None:
    config = build_config(_rules(
        {"match": "orders", "cloudevents": True, "event_type": "com.example.order"},
        {"match": "events", "cloudevents": True},
        {"match": ".*"},
    ), env={})
    typed, untyped, plain = config.relay.topic_rules
    assert (typed.cloudevents, typed.event_type) == (True, "com.example.order")
    assert TopicFlags.of(typed) == TopicFlags(cloudevents=True, type_required=False)
    assert TopicFlags.of(untyped) == TopicFlags(cloudevents=True, type_required=True)
    assert TopicFlags.of(plain) == TopicFlags() and plain.event_type is None
