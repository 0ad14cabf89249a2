"""Every config key from the environment (outbox_relay.config.env): RELAY_<SECTION>__<KEY>
over the profile's TOML, lists and tables as JSON, the six older names as aliases, secrets
kept secret, and one error line that names the key and the variable."""

from __future__ import annotations

import pytest

from outbox_relay.config.env import ENV_ALIASES, reads_variable
from outbox_relay.config.load import build_config
from outbox_relay.errors import ConfigError

SECRET = "s3cret-pw-4711"


def _error(data: dict[str, object], env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as caught:
        build_config(data, env=env)
    assert caught.value.exit_code == 2
    message = str(caught.value)
    print(message)
    assert "\n" not in message
    return message


def test_the_environment_wins_over_the_profile_which_wins_over_the_defaults() -> None:
    profile = {"kafka": {"linger_ms": 7}, "relay": {"batch_size": 500}}
    assert build_config(profile, env={}).kafka.linger_ms == 7
    config = build_config(profile, env={"RELAY_KAFKA__LINGER_MS": "9"})
    assert config.kafka.linger_ms == 9
    assert config.relay.batch_size == 500  # the rest of the section stays the profile's
    assert build_config({}, env={}).kafka.linger_ms == 5


def test_every_section_and_type_maps_to_a_nested_variable() -> None:
    config = build_config({}, env={
        "RELAY_POSTGRES__CONNECT_TIMEOUT_S": "3",
        "RELAY_KAFKA__COMPRESSION_TYPE": "zstd",
        "RELAY_LEDGER__FLUSH_INTERVAL_S": "2.5",
        "RELAY_RELAY__DRAIN_LANE": "false",
        "RELAY_SPARK__MASTER": "spark://m:7077",
        "RELAY_METRICS__ENABLED": "true",
        "relay_metrics__port": "9999",  # names are not case-sensitive
    })
    assert (config.postgres.connect_timeout_s, config.kafka.compression_type,
            config.ledger.flush_interval_s, config.relay.drain_lane, config.spark.master,
            config.metrics.enabled, config.metrics.port) == (
        3, "zstd", 2.5, False, "spark://m:7077", True, 9999)


def test_lists_and_tables_parse_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_JAAS", "jaas line")
    config = build_config({"relay": {"include_topics": [".*"]}}, env={
        "RELAY_RELAY__INCLUDE_TOPICS": '["orders\\\\..*", "payments"]',
        "RELAY_RELAY__TOPIC_RULES": '[{"match": "orders\\\\..*", "policy": "park"}]',
        "RELAY_KAFKA__JAVA_OPTIONS": '{"security.protocol": "SASL_SSL", '
                                     '"sasl.jaas.config": "env:KAFKA_JAAS"}',
        "RELAY_SPARK__CONF": '{"spark.ui.enabled": "false"}',
    })
    assert config.relay.include_topics == ["orders\\..*", "payments"]
    assert [(r.match, r.policy) for r in config.relay.topic_rules] == [("orders\\..*", "park")]
    # Kafka option values `env:NAME` keep naming another variable.
    assert config.kafka.java_options == {"security.protocol": "SASL_SSL",
                                         "sasl.jaas.config": "jaas line"}
    assert config.spark.conf == {"spark.ui.enabled": "false"}


def test_the_older_names_are_aliases_and_the_nested_name_wins() -> None:
    assert set(ENV_ALIASES) == {"RELAY_POSTGRES_URL", "RELAY_KAFKA_BOOTSTRAP_SERVERS",
                                "RELAY_LEDGER_PATH", "RELAY_CHECKPOINT_PATH",
                                "RELAY_SOURCE_NAME", "RELAY_PUSHGATEWAY_URL"}
    config = build_config({}, env={"RELAY_SOURCE_NAME": "old", "RELAY_LEDGER_PATH": "/l"})
    assert (config.relay.source_name, config.ledger.path) == ("old", "/l")
    both = {"RELAY_SOURCE_NAME": "old", "RELAY_RELAY__SOURCE_NAME": "new"}
    assert build_config({}, env=both).relay.source_name == "new"


def test_an_empty_variable_counts_as_unset() -> None:
    profile = {"metrics": {"pushgateway_url": "http://push:9091"}, "kafka": {"linger_ms": 7}}
    config = build_config(profile, env={"RELAY_PUSHGATEWAY_URL": "",
                                        "RELAY_KAFKA__LINGER_MS": ""})
    assert (config.metrics.pushgateway_url, config.kafka.linger_ms) == ("http://push:9091", 7)


def test_other_relay_variables_are_not_config_keys() -> None:
    """RELAY_STACK_DIR, RELAY_LOG_LEVEL, RELAY_CONFIG and friends are read elsewhere."""
    env = {"RELAY_STACK_DIR": "/x", "RELAY_LOG_LEVEL": "debug", "RELAY_CONFIG": "p.toml",
           "RELAY_POSTGRES_PASSWORD": "pw", "RELAY_PUSHGATEWAY_USERNAME": "u"}
    assert build_config({}, env=env).relay.source_name == "outbox-relay"
    assert not reads_variable("RELAY_STACK_DIR") and not reads_variable("RELAY_CONFIG")
    assert reads_variable("RELAY_KAFKA__LINGER_MS") and reads_variable("RELAY_POSTGRES_URL")
    assert reads_variable("RELAY_POSTGRES_PASSWORD")


@pytest.mark.parametrize(("env", "named"), [
    ({"RELAY_KAFKA__LINGER_MS": "-1"}, "kafka.linger_ms (from RELAY_KAFKA__LINGER_MS)"),
    ({"RELAY_RELAY__BATCH_SIZE": "many"}, "relay.batch_size (from RELAY_RELAY__BATCH_SIZE)"),
    ({"RELAY_KAFKA__LINGERMS": "5"}, "kafka.lingerms (from RELAY_KAFKA__LINGERMS): unknown"),
    ({"RELAY_KAFK__LINGER_MS": "5"}, "kafk.linger_ms (from RELAY_KAFK__LINGER_MS): unknown"),
    ({"RELAY_RELAY__INCLUDE_TOPICS": '["("]'},
     "relay.include_topics (from RELAY_RELAY__INCLUDE_TOPICS)"),
    ({"RELAY_RELAY__INCLUDE_TOPICS": "orders.*"},
     "relay.include_topics (from RELAY_RELAY__INCLUDE_TOPICS): not valid JSON"),
    ({"RELAY_RELAY__TOPIC_RULES": '[{"match": "a", "policy": "drop"}]'},
     "relay.topic_rules.0.policy (from RELAY_RELAY__TOPIC_RULES)"),
    ({"RELAY_PUSHGATEWAY_URL": "ftp://push"},
     "metrics.pushgateway_url (from RELAY_PUSHGATEWAY_URL)"),
    ({"RELAY_RELAY__HEARTBEAT_INTERVAL_S": "50"},
     "relay.heartbeat_interval_s (from RELAY_RELAY__HEARTBEAT_INTERVAL_S)"),
])
def test_a_bad_value_from_the_environment_names_the_key_and_the_variable(
    env: dict[str, str], named: str
) -> None:
    message = _error({}, env)
    assert message.startswith(f"invalid config key {named}"), message


def test_a_bad_value_from_the_profile_names_no_variable() -> None:
    message = _error({"kafka": {"linger_ms": -1}}, {"RELAY_KAFKA__BATCH_SIZE": "2048"})
    assert message.startswith("invalid config key kafka.linger_ms: "), message


@pytest.mark.parametrize("env", [
    {"RELAY_POSTGRES_PASSWORD": SECRET, "RELAY_POSTGRES__CONNECT_TIMEOUT_S": "0"},
    {"RELAY_POSTGRES__PASSWORD": SECRET, "RELAY_POSTGRES__SSLMODE": "sometimes"},
    {"RELAY_POSTGRES_URL": f"mysql://app:{SECRET}@db:5432/app"},
    {"RELAY_POSTGRES__URL": f"postgresql://app:{SECRET}@db:port/app"},
    {"RELAY_KAFKA__LIBRDKAFKA_OPTIONS": f'{{"sasl.password": "{SECRET}"'},
    {"RELAY_KAFKA__LIBRDKAFKA_OPTIONS": f'{{"sasl.password": ["{SECRET}"]}}'},
    {"RELAY_POSTGRES": f'{{"password": "{SECRET}", "url": 5}}'},
])
def test_no_secret_appears_in_an_error(env: dict[str, str]) -> None:
    assert SECRET not in _error({}, env)


def test_a_password_from_the_environment_stays_secret() -> None:
    config = build_config({}, env={"RELAY_POSTGRES__PASSWORD": SECRET})
    assert config.postgres.password is not None
    assert config.postgres.password.get_secret_value() == SECRET
    assert SECRET not in repr(config) and SECRET not in str(config.model_dump())


def test_the_profile_still_may_not_hold_a_password() -> None:
    message = _error({"postgres": {"password": SECRET}}, {})
    assert "postgres.password" in message and SECRET not in message
