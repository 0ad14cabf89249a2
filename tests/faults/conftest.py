"""Fixtures of the fault suite: fresh databases, private stacks, the soak switch, figures."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import outbox_relay.stack
from outbox_relay.stack import StackInfo
from tests.faults import report
from tests.faults.recorders import create_database, drop_database

LONG_ENV = "RELAY_FAULTS_LONG"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help=f"fault suite: soak mode, many more faults (or {LONG_ENV}=1)")


@pytest.fixture(scope="session")
def long_mode(request: pytest.FixtureRequest) -> bool:
    try:
        option = bool(request.config.getoption("--long"))
    except ValueError:  # the option is registered only when this conftest loads early
        option = False
    return option or os.environ.get(LONG_ENV) == "1"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


class Scenario(dict[str, Any]):
    """A scenario's figures; recorded into the run's report (tests/faults/report.py) when
    the test ends, pass or fail."""

    def __init__(self, key: str, mode: str) -> None:
        super().__init__(mode=mode)
        self.key = key
        self.started = time.monotonic()


@pytest.fixture
def scenario(request: pytest.FixtureRequest, long_mode: bool) -> Iterator[Scenario]:
    marker = request.node.get_closest_marker("scenario")
    assert marker is not None, "fault tests name their scenario with @pytest.mark.scenario"
    key = str(marker.args[0])
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None:
        key += f" [{callspec.id}]"
    figures = Scenario(key, "long" if long_mode else "quick")
    yield figures
    rep = getattr(request.node, "rep_call", None)
    passed = rep is not None and rep.passed
    figures["status"] = "passed" if passed else "FAILED"
    figures["test_s"] = round(time.monotonic() - figures.started, 1)
    if not passed and rep is not None and rep.failed:
        crash = getattr(rep.longrepr, "reprcrash", None)
        why = crash.message if crash is not None else str(rep.longrepr)
        figures["notes"] = f"FAILED: {why.splitlines()[0][:300]}"
    if rep is not None and not rep.skipped:
        report.record(figures.key, dict(figures))


@pytest.fixture
def fault_db(stack: StackInfo) -> Iterator[str]:
    """A migrated database of its own on the shared stack, with the recorders installed."""
    url = create_database(stack.postgres_url)
    yield url
    drop_database(stack.postgres_url, url)


@dataclass(frozen=True)
class PrivateStack:
    """A PostgreSQL and a Kafka broker of the fault suite's own, safe to stop and start.

    Scenarios that stop a service use it one at a time; each calls ensure_up() first."""

    dir: Path
    info: StackInfo

    def ensure_up(self) -> StackInfo:
        info = outbox_relay.stack.up(stack_dir=self.dir, use_env=False)
        assert info == self.info, "a restarted service keeps its port"
        return info


@pytest.fixture(scope="session")
def private_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateStack]:
    stack_dir = tmp_path_factory.mktemp("private-stack")
    info = outbox_relay.stack.up(stack_dir=stack_dir, use_env=False)
    try:
        yield PrivateStack(stack_dir, info)
    finally:
        with contextlib.suppress(Exception):
            outbox_relay.stack.down(stack_dir)
