from __future__ import annotations

from pathlib import Path

import pytest

from outbox_relay.config.load import (
    build_config,
    from_json_without_secrets,
    load_config,
    to_json_without_secrets,
)
from outbox_relay.errors import ConfigError
from outbox_relay.launch.spark import backlogs_on_driver

REPO = Path(__file__).resolve().parents[2]
# conf/local.toml names the running local stack; these give its addresses instead
# (tests/unit/test_local_stack_profile.py looks the stack up).
STACK_ADDRESSES = {"RELAY_POSTGRES_URL": "postgresql://postgres@127.0.0.1:5432/postgres",
                   "RELAY_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092"}


def test_local_profile_loads() -> None:
    config = load_config(REPO / "conf" / "local.toml", env=STACK_ADDRESSES)
    assert config.relay.partitioner == "murmur2"
    assert config.postgres.sslmode == "disable"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"relay": {"batch_sizee": 5}}, "relay.batch_sizee"),
        ({"relay": {"batch_size": "many"}}, "relay.batch_size"),
        ({"relay": {"partitioner": "random"}}, "relay.partitioner"),
        ({"relay": {"backlog_lane": "executors"}}, "relay.backlog_lane"),
        ({"kafka": {"bootstrap": "x"}}, "kafka.bootstrap"),
        ({"relay": {"include_topics": ["("]}}, "relay.include_topics"),
        ({"postgres": {"url": "mysql://x"}}, "postgres.url"),
        ({"nope": {}}, "nope"),
    ],
)
def test_invalid_config_names_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_config(data, env={})
    assert f"invalid config key {key}:" in str(err.value)
    assert err.value.exit_code == 2


def test_profile_may_not_hold_a_password() -> None:
    with pytest.raises(ConfigError, match=r"postgres\.password"):
        build_config({"postgres": {"password": "hunter2"}}, env={})


def test_password_moves_out_of_the_url() -> None:
    env = {"RELAY_POSTGRES_URL": "postgresql://app:s%40cret@db.internal:6543/outbox?sslmode=require"}
    pg = build_config({}, env=env).postgres
    assert pg.password is not None and pg.password.get_secret_value() == "s@cret"
    assert "s@cret" not in pg.url and "cret" not in pg.jdbc_url
    assert (pg.host, pg.port, pg.database, pg.user, pg.sslmode) == (
        "db.internal", 6543, "outbox", "app", "require")
    assert pg.where() == "db.internal:6543/outbox"


def test_password_env_and_overrides() -> None:
    env = {
        "RELAY_POSTGRES_PASSWORD": "pw",
        "RELAY_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1234",
        "RELAY_LEDGER_PATH": "/data/ledger",
    }
    config = build_config({}, env=env)
    assert config.postgres.password is not None
    assert config.postgres.password.get_secret_value() == "pw"
    assert config.kafka.bootstrap_servers == "127.0.0.1:1234"
    assert config.ledger.path == "/data/ledger"


def test_json_for_other_processes_carries_no_secret() -> None:
    config = build_config({}, env={"RELAY_POSTGRES_PASSWORD": "pw-123"})
    text = to_json_without_secrets(config)
    assert "pw-123" not in text
    again = from_json_without_secrets(text, env={"RELAY_POSTGRES_PASSWORD": "pw-123"})
    assert again.postgres.password is not None
    assert again.postgres.password.get_secret_value() == "pw-123"


def test_json_for_other_processes_carries_no_kafka_secret(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_JAAS", "secret-jaas")
    config = build_config({"kafka": {"java_options": {"sasl.jaas.config": "env:MY_JAAS"},
                                     "librdkafka_options": {"sasl.password": "env:MY_JAAS"}}},
                          env={})
    text = to_json_without_secrets(config)
    assert "secret-jaas" not in text
    again = from_json_without_secrets(text, env={})
    assert again.kafka.java_options == again.kafka.librdkafka_options == {}
    assert again.model_copy(update={"kafka": config.kafka}) == config


def test_kafka_options_resolve_env_references(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_JAAS", "secret-jaas")
    config = build_config({"kafka": {"java_options": {"sasl.jaas.config": "env:MY_JAAS"}}}, env={})
    assert config.kafka.java_options["sasl.jaas.config"] == "secret-jaas"
    monkeypatch.delenv("MY_JAAS")
    with pytest.raises(ConfigError, match=r"kafka\.java_options"):
        build_config({"kafka": {"java_options": {"sasl.jaas.config": "env:MY_JAAS"}}}, env={})


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "none.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[relay\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, env={})


def test_json_round_trip_finds_a_password_given_inside_the_url() -> None:
    env = {"RELAY_POSTGRES_URL": "postgresql://app:pw-in-url@db:5432/outbox"}
    text = to_json_without_secrets(build_config({}, env=env))
    assert "pw-in-url" not in text
    again = from_json_without_secrets(text, env=env)
    assert again.postgres.password is not None
    assert again.postgres.password.get_secret_value() == "pw-in-url"


# Fencing (issue 8, item 2.6): the timeouts must let the heartbeat keep the lock.
def test_default_timeouts_fit_the_lock_timeout() -> None:
    config = build_config({}, env={})
    lock_ms = config.relay.lock_timeout_s * 1000
    assert 0 < config.postgres.statement_timeout_ms < lock_ms
    assert 0 < config.postgres.idle_in_transaction_timeout_ms < lock_ms
    assert config.relay.heartbeat_interval_s * 3 <= config.relay.lock_timeout_s


def test_local_profile_timeouts_fit_the_lock_timeout() -> None:
    config = load_config(REPO / "conf" / "local.toml", env=STACK_ADDRESSES)
    assert config.postgres.statement_timeout_ms < config.relay.lock_timeout_s * 1000
    assert config.postgres.idle_in_transaction_timeout_ms < config.relay.lock_timeout_s * 1000


def test_unset_control_timeouts_follow_a_short_lock_timeout() -> None:
    config = build_config({"relay": {"lock_timeout_s": 6, "heartbeat_interval_s": 2}}, env={})
    assert config.postgres.statement_timeout_ms == 3000
    assert config.postgres.idle_in_transaction_timeout_ms == 3000
    kept = build_config({"relay": {"lock_timeout_s": 6, "heartbeat_interval_s": 2},
                         "postgres": {"idle_in_transaction_timeout_ms": 5000}}, env={})
    assert (kept.postgres.idle_in_transaction_timeout_ms, kept.postgres.statement_timeout_ms) \
        == (5000, 3000)


@pytest.mark.parametrize(
    ("data", "keys"),
    [
        ({"postgres": {"statement_timeout_ms": 120_000}},
         ("postgres.statement_timeout_ms", "relay.lock_timeout_s")),
        ({"postgres": {"statement_timeout_ms": 55_000}},
         ("postgres.statement_timeout_ms", "relay.heartbeat_interval_s")),
        ({"postgres": {"statement_timeout_ms": 0}}, ("postgres.statement_timeout_ms",)),
        ({"postgres": {"idle_in_transaction_timeout_ms": 60_000}},
         ("postgres.idle_in_transaction_timeout_ms", "relay.lock_timeout_s")),
        ({"postgres": {"idle_in_transaction_timeout_ms": 0}},
         ("postgres.idle_in_transaction_timeout_ms", "above 0")),
        ({"relay": {"heartbeat_interval_s": 30}},
         ("relay.heartbeat_interval_s", "relay.lock_timeout_s")),
        ({"relay": {"lock_timeout_s": 10}},
         ("relay.heartbeat_interval_s", "relay.lock_timeout_s")),
    ],
)
def test_timeouts_that_let_a_lock_lapse_are_refused(
    data: dict[str, object], keys: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as err:
        build_config(data, env={})
    assert err.value.exit_code == 2
    assert str(err.value).startswith("invalid config key ")
    assert "\n" not in str(err.value)
    for key in keys:
        assert key in str(err.value)


def test_the_executors_read_has_its_own_statement_timeout() -> None:
    from outbox_relay.data.read import jdbc_options

    pg = build_config({"postgres": {"read_statement_timeout_ms": 300_000}}, env={}).postgres
    assert "statement_timeout=300000" in jdbc_options(pg)["options"]
    assert pg.statement_timeout_ms != 300_000


def test_the_read_names_its_lock_token_in_a_connection_setting_escaped() -> None:
    """PostgreSQL splits start-up options on white space; a backslash makes the next
    character literal. A source name may hold both."""
    from outbox_relay.data.read import LOCK_TOKEN_SETTING, jdbc_options

    pg = build_config({}, env={}).postgres
    token = "my relay\\x\tz@host:12:ab"
    options = jdbc_options(pg, {LOCK_TOKEN_SETTING: token})["options"]
    assert options.endswith(" -c relay.lock_token=my\\ relay\\\\x\\\tz@host:12:ab")
    assert options.startswith("-c statement_timeout=")
    assert "relay.lock_token" not in jdbc_options(pg)["options"]


# Item 2.7: the producer's delivery guarantees are not pass-through options.
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("acks", "1"),
        ("acks", "all"),
        ("ACKS", "0"),
        ("kafka.acks", "1"),
        (" acks ", "1"),
        ("enable.idempotence", "false"),
        ("Enable.Idempotence", "true"),
        ("max.in.flight.requests.per.connection", "10"),
        ("MAX.IN.FLIGHT.REQUESTS.PER.CONNECTION", "1"),
    ],
)
def test_java_options_may_not_override_delivery_guarantees(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_config({"kafka": {"java_options": {key: value}}}, env={})
    assert err.value.exit_code == 2
    assert f"kafka.java_options.{key}" in str(err.value)


@pytest.mark.parametrize(("key", "setting"), [
    ("compression.type", "kafka.compression_type"),
    ("kafka.max.request.size", "kafka.max_request_size"),
    ("Linger.Ms", "kafka.linger_ms"),
    ("bootstrap.servers", "kafka.bootstrap_servers"),
])
def test_java_options_may_not_override_what_the_relay_derives(key: str, setting: str) -> None:
    # The size check reads the codec and max.request.size from the relay's own settings.
    with pytest.raises(ConfigError, match=f"kafka.java_options.{key}: set {setting} instead"):
        build_config({"kafka": {"java_options": {key: "x"}}}, env={})


def test_other_java_options_pass_through() -> None:
    options = {"security.protocol": "SASL_SSL", "client.id": "relay"}
    kafka = build_config({"kafka": {"java_options": options}}, env={}).kafka
    assert kafka.java_options == options


def test_an_empty_spark_master_is_unset_and_an_omitted_one_local() -> None:
    # TOML has no null: a cluster profile (conf/databricks.toml) writes `master = ""`.
    assert build_config({"spark": {"master": ""}}, env={}).spark.master is None
    assert build_config({}, env={}).spark.master == "local[2]"


@pytest.mark.parametrize(
    ("lane", "master", "on_driver"),
    [
        ("auto", "local[2]", True),
        ("auto", "local[*]", True),
        ("auto", "spark://cluster:7077", False),
        ("auto", "", False),  # the cluster's own master (Databricks)
        ("direct", "spark://cluster:7077", True),
        ("spark", "local[2]", False),
    ],
)
def test_the_backlog_lane_follows_the_master_under_auto(
        lane: str, master: str, on_driver: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)  # not under spark-submit
    config = build_config({"relay": {"backlog_lane": lane}, "spark": {"master": master}},
                          env={})
    assert backlogs_on_driver(config) is on_driver


def test_backlogs_go_to_spark_unless_a_profile_says_otherwise() -> None:
    assert build_config({}, env={}).relay.backlog_lane == "spark"
    local = load_config(REPO / "conf" / "local.toml", env=STACK_ADDRESSES)
    assert local.relay.backlog_lane == "auto" and backlogs_on_driver(local)
