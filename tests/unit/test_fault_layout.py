"""The fault suite's tools stay split by concern, and both tiers read Kafka back through
one consumer (tests/kafka_readback.py), so a fix to the oracle reaches every test."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MAX_LINES = 250


def test_every_fault_module_is_small() -> None:
    long = {p.name: n for p in sorted((TESTS / "faults").glob("*.py"))
            if not p.name.startswith("test_")
            and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long


def _read_committed_consumers(path: Path) -> int:
    """Consumers a module builds with read_committed: what a verification reader uses."""
    found = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values, strict=True)
            found += any(isinstance(k, ast.Constant) and k.value == "isolation.level"
                         and isinstance(v, ast.Constant) and v.value == "read_committed"
                         for k, v in pairs)
    return found


def test_one_consumer_reads_kafka_back_for_every_tier() -> None:
    readers = {str(p.relative_to(TESTS)): n for p in sorted(TESTS.rglob("*.py"))
               if (n := _read_committed_consumers(p))}
    assert readers == {"kafka_readback.py": 1}, readers
