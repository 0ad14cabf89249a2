"""The shipped alert rules, tested by Prometheus's own promtool."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime

from relay.config import MetricsConfig
from relay.observe.collector import families
from relay.observe.runtime import RuntimeMetrics
from relay.observe.status import LedgerStatus, Snapshot
from tests.prometheus_tools import REPO, tool

RULES = REPO / "deploy" / "prometheus" / "outbox-relay.rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "outbox-relay.rules.test.yml"

def _database_side() -> set[str]:
    """The names the database-side collector exposes, from the collector itself."""
    snapshot = Snapshot(
        generated_at=datetime.now(UTC), lock_timeout_s=60.0, topics=[],
        ledger=LedgerStatus(path="l", delta_read=False, delta_exists=False, delta_version=None,
                            delta_error=None, staged_records=0, staged_messages=0,
                            oldest_staged_at=None, oldest_staged_age_s=None),
        horizon=None, queue_table=None)
    return {family.name for family in families(snapshot, 10, 0.0)}


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
    } | _database_side()
    used = set(re.findall(r"\boutbox_relay_[a-z_]+", RULES.read_text(encoding="utf-8")))
    assert used
    assert used <= exposed, sorted(used - exposed)
