from __future__ import annotations

import pytest

from outbox_relay.config import TopicRule
from outbox_relay.control.kafka_admin import TopicConfig, _topic_config, topic_name_problem
from outbox_relay.control.migrate import discover
from outbox_relay.control.pending import TopicFilter
from outbox_relay.rules.topic_rules import rule_for
from outbox_relay.stream.failures import describe_failure, read_failed
from outbox_relay.stream.runner import EXIT_INTERRUPTED, EXIT_LEFT_OVER, EXIT_OK, _exit_code


@pytest.mark.parametrize("name", ["orders", "a.b_c-D9", "x" * 249])
def test_legal_topic_names(name: str) -> None:
    assert topic_name_problem(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "has space", "quo'te", "semi;colon",
                                  "ünïcode", "drop table;--"])
def test_illegal_topic_names(name: str) -> None:
    problem = topic_name_problem(name)
    assert problem is not None and "topic name" in problem


def test_topic_filter_full_match() -> None:
    f = TopicFilter(["orders\\..*", "billing"], ["orders\\.internal"])
    assert f("orders.eu") and f("billing")
    assert not f("orders.internal") and not f("billing2") and not f("xorders.eu")


def test_first_matching_rule_wins() -> None:
    rules = [TopicRule(match="prices", compact=True), TopicRule(match=".*", policy="park")]
    assert rule_for(rules, "prices").compact
    assert rule_for(rules, "other").policy == "park"
    assert rule_for([], "any").policy == "block"


def test_describe_failure_prefers_the_kafka_exception() -> None:
    text = (
        "An error occurred while calling o123.save.\n: org.apache.spark.SparkException: Job aborted"
        "\nCaused by: org.apache.kafka.common.errors.RecordTooLargeException: The message is "
        "2000000 bytes\n\tat org.apache..."
    )
    assert describe_failure(RuntimeError(text)).startswith(
        "org.apache.kafka.common.errors.RecordTooLargeException: The message is 2000000 bytes"
    )
    assert describe_failure(RuntimeError("plain")) == "plain"
    spark_text = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: Lost task 0.0: "
        "org.apache.kafka.common.InvalidRecordException: Compacted topic cannot accept message"
    )
    assert describe_failure(RuntimeError(spark_text)).startswith(
        "org.apache.kafka.common.InvalidRecordException: Compacted topic"
    )


def test_a_failed_jdbc_read_is_told_from_a_kafka_failure() -> None:
    # As Spark reported a task whose read lost PostgreSQL (fault suite, scenario 3).
    read = (
        "An error occurred while calling o88.save.\n: org.apache.spark.SparkException: Job "
        "aborted due to stage failure: Task 0 in stage 2.0 failed 1 times, most recent failure:"
        " Lost task 0.0 in stage 2.0 (TID 3) (localhost executor driver): "
        "org.postgresql.util.PSQLException: An I/O error occurred while sending to the backend."
        "\n\tat org.postgresql.core.v3.QueryExecutorImpl.execute(QueryExecutorImpl.java:399)"
        "\nCaused by: java.io.EOFException"
    )
    reason = describe_failure(RuntimeError(read))
    assert reason == ("org.postgresql.util.PSQLException: An I/O error occurred while sending "
                      "to the backend.")
    assert read_failed(reason)
    kafka = read.replace("org.postgresql.util.PSQLException: An I/O error occurred while "
                         "sending to the backend.",
                         "org.apache.kafka.common.errors.TimeoutException: Expiring 3 record(s)")
    assert not read_failed(describe_failure(RuntimeError(kafka)))
    assert not read_failed(describe_failure(RuntimeError("org.apache.spark.SparkException: x")))


def test_migrations_are_numbered_and_ordered() -> None:
    migrations = discover()
    versions = [m.version for m in migrations]
    assert versions == sorted(versions) == list(range(1, len(versions) + 1))
    assert migrations[0].name == "deimos_tables"


def test_volatile_default_is_a_separate_statement() -> None:
    sql = next(m.sql for m in discover() if m.name == "transaction_ids")
    code = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
    statements = [s.strip() for s in code.split(";") if s.strip()]
    add = [s for s in statements if "ADD COLUMN" in s]
    assert add and all("DEFAULT" not in s for s in add)
    assert any("SET DEFAULT pg_current_xact_id()" in s for s in statements)


def test_exit_codes() -> None:
    assert _exit_code(False, True, False, []) == EXIT_OK
    assert _exit_code(True, False, False, []) == EXIT_OK
    left = [object()]
    assert _exit_code(True, False, False, left) == EXIT_LEFT_OVER  # type: ignore[arg-type]
    assert _exit_code(True, True, False, left) == EXIT_INTERRUPTED  # type: ignore[arg-type]


class _Entry:
    def __init__(self, value: str | None) -> None:
        self.value = value


@pytest.mark.parametrize(("policy", "compacted"), [
    ("compact", True), ("delete", False), ("compact,delete", True), ("delete, compact", True),
    (None, False),
])
def test_topic_config_reads_compaction_and_size(policy: str | None, compacted: bool) -> None:
    entries = {"max.message.bytes": _Entry("1000")}
    if policy is not None:
        entries["cleanup.policy"] = _Entry(policy)
    assert _topic_config(entries) == TopicConfig(1000, compacted)


def test_topic_config_without_a_size() -> None:
    assert _topic_config({}) == TopicConfig(None, False)
