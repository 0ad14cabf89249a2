"""What each install of the distribution brings (pyproject.toml), and what the bundle and
the metrics app install: the base is the publisher and the test fixture alone, the relay's
runtime is the [relay] extra, with ranges, and every way of deploying the relay asks for it.
tests/integration/test_base_install.py installs the base wheel for real."""

from __future__ import annotations

import tomllib
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from outbox_relay.launch.extras import RELAY_EXTRA, RELAY_EXTRA_MODULES
from tests.bundle import REPO

PROJECT: dict[str, Any] = tomllib.loads(
    (REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
# The [relay] extra as a requirements file, for installers that take a wheel's base only
# (a Databricks `whl` library): the bundle's tasks install it beside the wheel.
RELAY_REQUIREMENTS = REPO / "requirements" / "relay.txt"
# What an application must never get from `pip install outbox-relay` (issue 48): a Kafka
# client, a Delta library, a database driver, a Prometheus client.
RUNTIME_FAMILIES = ("confluent-kafka", "deltalake", "psycopg", "psycopg2", "psycopg2-binary",
                    "psycopg-binary", "asyncpg", "prometheus-client")


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_the_base_install_needs_nothing_but_python() -> None:
    """The publisher and the fixture import only the standard library (and pytest, which
    the application's tests bring): the base has no dependency at all."""
    assert PROJECT["dependencies"] == []


def test_the_relay_extra_is_the_runtime_with_ranges_not_pins() -> None:
    relay = [Requirement(r) for r in EXTRAS[RELAY_EXTRA]]
    names = {canonicalize_name(r.name) for r in relay}
    assert names == {"confluent-kafka", "deltalake", "prometheus-client", "psycopg2-binary",
                     "pydantic", "pydantic-settings"}
    for r in relay:
        assert r.specifier, f"{r}: no range at all"
        assert not any(s.operator in ("==", "===") for s in r.specifier), f"{r}: an exact pin"
        assert any(s.operator in ("<", "<=", "~=") for s in r.specifier), f"{r}: no upper bound"
    # The module the check looks for, for each distribution (outbox_relay/launch/extras.py).
    assert {n.replace("-", "_").removesuffix("_binary") for n in names} == set(
        RELAY_EXTRA_MODULES)


def test_every_extra_that_runs_the_relay_brings_the_relay_extra() -> None:
    """`pip install 'outbox-relay[spark]'`, which the run's own error line names, and the
    local stack's [local] need the relay's runtime too."""
    for extra in ("spark", "local"):
        selves = [Requirement(r) for r in EXTRAS[extra]
                  if canonicalize_name(Requirement(r).name) == "outbox-relay"]
        assert [sorted(r.extras) for r in selves] == [[RELAY_EXTRA]], extra


def test_the_bundles_requirements_file_is_the_relay_extra() -> None:
    """A Databricks `whl` library installs a wheel's base only, never an extra: the
    bundle's tasks install this file beside it (resources/outbox_relay.job.yml)."""
    lines = [line.strip() for line in RELAY_REQUIREMENTS.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert sorted(lines) == sorted(EXTRAS[RELAY_EXTRA])


def test_the_bundles_relay_tasks_install_the_relay_extra() -> None:
    jobs = yaml.safe_load((REPO / "resources" / "outbox_relay.job.yml").read_text("utf-8"))
    wanted = f"${{workspace.file_path}}/{RELAY_REQUIREMENTS.relative_to(REPO)}"
    tasks = [t for job in jobs["resources"]["jobs"].values() for t in job["tasks"]
             if "python_wheel_task" in t]
    assert tasks
    for task in tasks:
        libraries = task["libraries"]
        assert {"requirements": wanted} in libraries, (task["task_key"], libraries)
        assert any("whl" in lib for lib in libraries), task["task_key"]


def test_the_metrics_app_installs_the_relay_extra() -> None:
    """`metrics serve` reads PostgreSQL (psycopg2) and serves Prometheus' format."""
    text = (REPO / "deploy" / "databricks-app" / "requirements.txt").read_text("utf-8")
    wanted = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert wanted and all(f"[{RELAY_EXTRA}]" in line for line in wanted), wanted
