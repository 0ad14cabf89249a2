"""No statement or module of outbox_relay/ spells a ledger outcome itself: each names Outcome
(outbox_relay/rules/outcomes.py), so a new outcome cannot be missed in one place."""

from __future__ import annotations

import ast
from pathlib import Path

from outbox_relay.rules.outcomes import Outcome

RELAY = Path(__file__).resolve().parents[2] / "outbox_relay"
HOME = RELAY / "rules" / "outcomes.py"


def test_no_module_spells_an_outcome_in_sql() -> None:
    quoted = [f"'{o.value}'" for o in Outcome]
    found = []
    for path in sorted(RELAY.rglob("*.py")):
        if path == HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [(path.name, q) for q in quoted if q in node.value]
    assert found == []


def test_outcomes_are_plain_strings_for_sql_and_prometheus() -> None:
    assert [str(o) for o in Outcome] == [o.value for o in Outcome]
