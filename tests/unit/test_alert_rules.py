"""The shipped alert rules, tested by Prometheus's own promtool."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime
from typing import Any

import yaml

from outbox_relay.config import MetricsConfig
from outbox_relay.observe.collector import DATABASE_UP, PREFIX, families
from outbox_relay.observe.labels import TopicLabels
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.observe.status import LedgerStatus, Snapshot
from tests.prometheus_tools import REPO, tool

RULES = REPO / "deploy" / "prometheus" / "outbox-relay.rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "outbox-relay.rules.test.yml"
# What the issue asked for beside the rules on the outbox's state: the exporter reading
# the database, a drain's push going stale or missing, the horizon held.
REQUIRED = {
    "OutboxRelayDatabaseDown": "outbox_relay_database_up == 0",
    "OutboxRelayDrainPushStale": "push_time_seconds",
    "OutboxRelayDrainPushAbsent": "absent(push_time_seconds",
    "OutboxRelayHorizonHeld": "outbox_relay_horizon_age_seconds",
}


def _database_side() -> set[str]:
    """The names the database-side collector exposes, from the collector itself."""
    snapshot = Snapshot(
        generated_at=datetime.now(UTC), lock_timeout_s=60.0, topics=[],
        ledger=LedgerStatus(path="l", delta_read=False, delta_exists=False, delta_version=None,
                            delta_error=None, staged_records=0, staged_messages=0,
                            oldest_staged_at=None, oldest_staged_age_s=None),
        horizon=None, queue_table=None)
    names = {family.name for family in families(snapshot, TopicLabels(10), 0.0)}
    return names | {PREFIX + DATABASE_UP}


def test_promtool_checks_the_rules_and_their_unit_tests_pass() -> None:
    promtool = tool("promtool")
    check = subprocess.run([promtool, "check", "rules", RULES], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in check.stdout
    result = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_use_only_metrics_that_exist() -> None:
    exposed = {
        sample.name
        for family in RuntimeMetrics(MetricsConfig(), "t").registry.collect()
        for sample in family.samples
    } | _database_side()
    used = set(re.findall(r"\boutbox_relay_[a-z_]+", RULES.read_text(encoding="utf-8")))
    assert used
    assert used <= exposed, sorted(used - exposed)


def _alerts() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def test_the_alerts_the_issue_asked_for_exist() -> None:
    alerts = _alerts()
    for name, needle in REQUIRED.items():
        assert name in alerts, sorted(alerts)
        assert needle in " ".join(alerts[name]["expr"].split()), alerts[name]["expr"]


def test_no_alert_on_the_outbox_state_needs_a_push() -> None:
    """The backlog alone decides whether no success is a problem: a drain's push froze it
    at its last value (0 after a clean drain), so the rule must read the exporter's."""
    no_success = " ".join(_alerts()["OutboxRelayNoSuccess"]["expr"].split())
    assert "sum(outbox_relay_backlog_messages) > 0" in no_success
    assert "absent(outbox_relay_last_success_timestamp_seconds)" in no_success


def test_every_alert_has_a_promtool_test_that_sees_it_fire() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])
             if case.get("exp_alerts")}
    assert set(_alerts()) <= fired, sorted(set(_alerts()) - fired)


def test_every_alert_links_its_section_of_the_docs() -> None:
    """A heading `### OutboxRelayX` is the anchor `#outboxrelayx` (GitHub's rule)."""
    page = REPO / "docs" / "metrics.md"
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    for name, rule in _alerts().items():
        url = rule["annotations"].get("runbook_url", "")
        assert url == f"docs/metrics.md#{name.lower()}", (name, url)
        assert name.lower() in anchors, f"docs/metrics.md has no section {name}"
