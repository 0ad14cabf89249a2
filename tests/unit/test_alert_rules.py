"""The shipped alert rules, tested by Prometheus's own promtool."""

from __future__ import annotations

import re
import subprocess

from relay.config import MetricsConfig
from relay.observe.runtime import RuntimeMetrics
from tests.prometheus_tools import REPO, tool

RULES = REPO / "deploy" / "prometheus" / "outbox-relay.rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "outbox-relay.rules.test.yml"

# The database-side gauges of issue 11 (`outbox-relay status`'s collector).
DATABASE_SIDE = {
    "outbox_relay_backlog_messages",
    "outbox_relay_oldest_message_age_seconds",
    "outbox_relay_topic_state",
    "outbox_relay_topic_retries",
    "outbox_relay_parked_messages",
    "outbox_relay_ledger_staged_records",
}


def test_promtool_checks_the_rules_and_their_unit_tests_pass() -> None:
    promtool = tool("promtool")
    check = subprocess.run([promtool, "check", "rules", RULES], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 4 rules found" in check.stdout
    result = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_use_only_metrics_that_exist() -> None:
    exposed = {
        sample.name
        for family in RuntimeMetrics(MetricsConfig(), "t").registry.collect()
        for sample in family.samples
    } | DATABASE_SIDE
    used = set(re.findall(r"\boutbox_relay_[a-z_]+", RULES.read_text(encoding="utf-8")))
    assert used
    assert used <= exposed, sorted(used - exposed)
