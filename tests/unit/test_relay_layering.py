"""The imports inside outbox_relay/ run one way: the rules, the configuration and the ledger never
reach up into what runs them (the stream, the wiring, the operator's views), and the
streaming classes receive their collaborators and settings instead of the whole Relay."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RELAY = Path(__file__).resolve().parents[2] / "outbox_relay"

# A package, and the modules its files must not import.
_BELOW = {
    "config": ("outbox_relay.observe", "outbox_relay.stream", "outbox_relay.wiring"),
    "ledger": ("outbox_relay.stream", "outbox_relay.wiring"),
    "data": ("outbox_relay.stream", "outbox_relay.wiring"),
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


@pytest.mark.parametrize("package", sorted(_BELOW))
def test_a_lower_package_imports_nothing_above_it(package: str) -> None:
    files = sorted((RELAY / package).glob("*.py")) or [RELAY / f"{package}.py"]
    upward = {f"{path.relative_to(RELAY.parent)}: {name}"
              for path in files for name in _imports(path)
              for above in _BELOW[package] if name == above or name.startswith(above + ".")}
    assert not upward, sorted(upward)


RUNNERS = ("runner.py", "many.py", "database_run.py")


def test_the_streaming_classes_receive_their_parts_not_the_relay() -> None:
    """outbox_relay.wiring gives each class the collaborators and settings it uses; only the
    runners, which the application hands the wired whole (or, for several databases, the
    means to wire each), hold the Relay."""
    holders = {f"{path.relative_to(RELAY.parent)}: {name}"
               for path in sorted((RELAY / "stream").glob("*.py")) if path.name not in RUNNERS
               for name in _imports(path) if name.startswith("outbox_relay.wiring")}
    assert not holders, sorted(holders)
