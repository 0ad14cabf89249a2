"""A profile of several databases, without a database: its parsing and the one-database
profiles it makes, the child stops, the exit code of several outcomes, and the metrics of
several relays in one exposition."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from outbox_relay.cli import main as cli_main
from outbox_relay.config.load import (
    build_config,
    from_json_without_secrets,
    one_database,
    select_database,
    to_json_without_secrets,
)
from outbox_relay.errors import ConfigError, DatabaseUnavailableError
from outbox_relay.exit_codes import ExitCode
from outbox_relay.observe.databases import DatabaseMetrics
from outbox_relay.stream.many import DatabaseOutcome, ManyResult
from outbox_relay.stream.runner import RunResult
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal


def _profile(**extra: Any) -> dict[str, Any]:
    return {
        "relay": {"source_name": "relay", "include_topics": ["orders\\..*"]},
        "ledger": {"path": "/data/ledger"},
        "databases": [
            {"name": "eu", "url": "postgresql://app@db-eu:5432/shop"},
            {"name": "us-2", "url": "postgresql://app@db-us/shop", "password_env": "US_PW",
             "include_topics": ["payments\\..*"],
             "topic_rules": [{"match": "payments\\.x", "policy": "park"}]},
        ],
        **extra,
    }


def test_each_database_is_a_one_database_profile_of_its_own() -> None:
    config = build_config(_profile(), env={"RELAY_POSTGRES_PASSWORD_EU": "e", "US_PW": "u"})
    eu, us = (one for _, one in config.each_database())
    assert (eu.postgres.url, us.postgres.url) == ("postgresql://app@db-eu:5432/shop",
                                                  "postgresql://app@db-us/shop")
    assert eu.postgres.password is not None and eu.postgres.password.get_secret_value() == "e"
    assert us.postgres.password is not None and us.postgres.password.get_secret_value() == "u"
    # The source of their records, their ledgers and checkpoints are their own.
    assert (eu.relay.source_name, us.relay.source_name) == ("relay/eu", "relay/us-2")
    assert (eu.ledger.path, us.ledger.path) == ("/data/ledger/eu", "/data/ledger/us-2")
    assert eu.relay.checkpoint_path.endswith("checkpoint/eu")
    # A key the entry leaves unset is the profile's; one it sets is its own.
    assert eu.relay.include_topics == ["orders\\..*"] and eu.relay.topic_rules == []
    assert us.relay.include_topics == ["payments\\..*"]
    assert [r.policy for r in us.relay.topic_rules] == ["park"]
    assert not eu.many and eu.databases == []


def test_a_profile_without_databases_relays_its_one_unchanged() -> None:
    config = build_config({"relay": {"source_name": "relay"}}, env={})
    assert not config.many
    assert config.each_database() == [(None, config)]
    assert one_database(config) is config
    assert select_database(config, None) is config


def test_a_database_profile_travels_without_its_password_and_finds_it_again() -> None:
    env = {"US_PW": "s3cret"}
    whole = build_config(_profile(), env=env)
    assert "s3cret" not in to_json_without_secrets(whole)
    text = to_json_without_secrets(whole.for_database("us-2"))
    assert "s3cret" not in text
    assert json.loads(text)["postgres"]["password_env"] == "US_PW"
    again = from_json_without_secrets(text, env)
    assert again.postgres.password is not None
    assert again.postgres.password.get_secret_value() == "s3cret"


def test_a_database_profile_reaches_the_source_as_the_driver_made_it_whatever_the_env() -> None:
    """The source's Python worker inherits the driver's environment: the variables that
    made the whole profile must not remake a database's own (its URL above all: with
    RELAY_POSTGRES_URL set, every source polled that one database, and a drain's query
    ended at once, finding no work there)."""
    env = {"US_PW": "s3cret", "RELAY_POSTGRES_URL": "postgresql://app@db-main/shop",
           "RELAY_DATABASES": json.dumps([{"name": "other", "url": "postgresql://h/o"}]),
           "RELAY_RELAY__INCLUDE_TOPICS": '["everything"]',
           "RELAY_RELAY__CHECKPOINT_PATH": "/elsewhere"}
    us = build_config(_profile(), env={"US_PW": "s3cret"}).for_database("us-2")

    again = from_json_without_secrets(to_json_without_secrets(us), env)

    assert again == us
    assert again.postgres.url == "postgresql://app@db-us/shop"
    assert again.relay.include_topics == ["payments\\..*"] and not again.many


@pytest.mark.parametrize(("databases", "error"), [
    ([{"name": "EU", "url": "postgresql://h/a"}], "databases.0.name"),
    ([{"name": "a", "url": "postgresql://h/a"}, {"name": "a", "url": "postgresql://h/b"}],
     "databases.1.name: 'a' names two databases"),
    ([{"name": "a", "url": "postgresql://u:pw@h/a"}],
     "databases.0.url: Value error, carries a password"),
    ([{"name": "a", "url": "mysql://h/a"}], "databases.0.url"),
    ([{"name": "a", "url": "postgresql://h/a", "password": "x"}], "databases.0.password"),
    ([{"name": "a", "url": "postgresql://h/a", "port": 1}], "databases.0.port: unknown"),
    ([{"name": "a", "url": "postgresql://h/a", "include_topics": ["("]}],
     "databases.0.include_topics: missing )"),
])
def test_a_bad_database_entry_is_one_error_naming_its_key(databases: list[dict[str, Any]],
                                                          error: str) -> None:
    with pytest.raises(ConfigError, match="invalid config key " + re.escape(error)):
        build_config({"databases": databases}, env={})


def test_a_source_name_too_long_with_a_database_name_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"databases\.0\.name: with relay\.source_name"):
        build_config({"relay": {"source_name": "x" * 199},
                      "databases": [{"name": "ab", "url": "postgresql://h/a"}]}, env={})


def test_a_command_on_one_database_needs_database_with_several() -> None:
    config = build_config(_profile(), env={})
    with pytest.raises(ConfigError, match=r"names 2 databases \(eu, us-2\): choose one"):
        one_database(config)
    assert select_database(config, "eu").postgres.url.endswith("db-eu:5432/shop")
    with pytest.raises(ConfigError, match=r"no such database .* names eu, us-2"):
        select_database(config, "asia")
    with pytest.raises(ConfigError, match="names no databases"):
        select_database(build_config({}, env={}), "eu")


def test_an_operator_verb_on_a_profile_of_several_says_to_choose_one(
    tmp_path: Any, capsys: pytest.CaptureFixture[str],
) -> None:
    profile = tmp_path / "many.toml"
    profile.write_text('[[databases]]\nname = "a"\nurl = "postgresql://h/a"\n'
                       '[[databases]]\nname = "b"\nurl = "postgresql://h/b"\n')
    code = cli_main(["--config", str(profile), "topics"])
    assert code == ExitCode.USAGE
    assert "choose one with --database NAME" in capsys.readouterr().err


def test_a_child_stop_follows_its_parent_and_aborts_alone() -> None:
    parent = StopSignal()
    first, second = parent.child(), parent.child()
    first.abort("its database failed")
    assert first.requested and not second.requested and not parent.requested
    parent.run_out("the time budget ran out")
    assert second.requested and second.ran_out and not second.interrupted
    late = parent.child()
    assert late.requested and late.ran_out
    assert first.root is parent and late.root is parent


def _outcome(name: str, code: int) -> DatabaseOutcome:
    return DatabaseOutcome(name, result=RunResult(code, RelayStats(), 1.0, []))


def test_the_exit_code_of_several_databases_is_the_worst_outcome() -> None:
    ok, left = _outcome("a", ExitCode.OK), _outcome("b", ExitCode.LEFT_OVER)
    down = DatabaseOutcome("c", error=DatabaseUnavailableError("connection refused"))
    assert ManyResult([ok, ok]).exit_code == ExitCode.OK
    assert ManyResult([ok, left]).exit_code == ExitCode.LEFT_OVER
    assert ManyResult([left, down, ok]).exit_code == down.exit_code
    assert down.exit_code != ExitCode.OK
    assert ManyResult([]).exit_code == ExitCode.OK


def _registry(sent: float, last: float) -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("relay_sent", "sent", ("topic",), registry=registry).labels("t").inc(sent)
    Gauge("relay_last", "last", registry=registry).set(last)
    return registry


def _samples(metrics: DatabaseMetrics) -> dict[tuple[str, str], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, s.labels["database"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if not s.name.endswith("_created")}


def test_several_relays_metrics_are_one_exposition_with_a_capped_database_label() -> None:
    metrics = DatabaseMetrics(max_labels=2)
    for name, sent, last in (("a", 1, 10), ("b", 2, 20), ("c", 3, 30), ("d", 4, 5)):
        metrics.add(name, _registry(sent, last))
    assert _samples(metrics) == {
        ("relay_sent_total", "a"): 1, ("relay_sent_total", "b"): 2,
        ("relay_sent_total", "(other)"): 7,  # counters summed
        ("relay_last", "a"): 10, ("relay_last", "b"): 20,
        ("relay_last", "(other)"): 30,  # the highest
    }
    metrics.add("a", _registry(5, 50))  # its relay built again
    assert _samples(metrics)[("relay_sent_total", "a")] == 5
    # One removed is shown no more, and its label stays its own: a newcomer shares (other).
    metrics.remove("a")
    metrics.add("e", _registry(6, 1))
    assert ("relay_sent_total", "a") not in _samples(metrics)
    assert _samples(metrics)[("relay_sent_total", "(other)")] == 13


def test_a_catalog_makes_a_profile_of_several_and_keeps_its_password_out_of_the_json() -> None:
    config = build_config({"catalog": {"url": "postgresql://relay@catalog/tenants",
                                       "query": "SELECT name, url FROM tenants"}},
                          env={"RELAY_CATALOG_PASSWORD": "c4t"})
    assert config.many and config.database_names() == []
    assert config.catalog is not None and config.catalog.password is not None
    assert config.catalog.password.get_secret_value() == "c4t"
    assert "c4t" not in to_json_without_secrets(config)
    with pytest.raises(ConfigError, match=r"catalog\.password: secrets are read"):
        build_config({"catalog": {"url": "postgresql://h/t", "query": "q", "password": "x"}},
                     env={})
    with pytest.raises(ConfigError, match=r"invalid config key catalog\.query"):
        build_config({"catalog": {"url": "postgresql://h/t", "query": ""}}, env={})
