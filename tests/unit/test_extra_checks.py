"""The checks of the `[spark]` and `[relay]` extras' modules (outbox_relay/launch/extras.py),
and every way the run and the commands start stopping at them with one line, in a Python
that cannot import them. No network, no Spark: the modules are hidden from this venv's own
Python."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Callable
from importlib.machinery import ModuleSpec

import pytest
from packaging.requirements import Requirement

from outbox_relay.errors import ConfigError
from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.extras import (
    INSTALL,
    RELAY_EXTRA_MODULES,
    RELAY_INSTALL,
    SPARK_EXTRA_MODULES,
    Finder,
    missing_spark_modules,
    require_relay_extra,
    require_spark_extra,
)
from tests.bundle import REPO


def _without(*hidden: str) -> Finder:
    def find(name: str) -> ModuleSpec | None:
        return None if name in hidden else ModuleSpec(name, None)

    return find


def test_nothing_is_missing_in_the_test_venv() -> None:
    assert missing_spark_modules() == []
    require_spark_extra()
    require_relay_extra()


def test_a_module_set_to_none_in_sys_modules_counts_as_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "numpy", None)
    assert missing_spark_modules() == ["numpy"]


def test_a_module_without_a_spec_counts_as_present() -> None:
    def find(name: str) -> ModuleSpec | None:
        raise ValueError(f"{name}.__spec__ is None")

    assert missing_spark_modules(find) == []


@pytest.mark.parametrize(("require", "extra", "install", "hidden"), [
    (require_spark_extra, "[spark]", INSTALL, ("numpy",)),
    (require_spark_extra, "[spark]", INSTALL, SPARK_EXTRA_MODULES),
    (require_spark_extra, "[spark]", INSTALL, ("pyarrow",)),
    (require_relay_extra, "[relay]", RELAY_INSTALL, ("psycopg2",)),
    (require_relay_extra, "[relay]", RELAY_INSTALL, RELAY_EXTRA_MODULES),
])
def test_the_error_is_one_line_naming_each_missing_module_and_the_extra(
    require: Callable[[Finder], None], extra: str, install: str, hidden: tuple[str, ...],
) -> None:
    with pytest.raises(ConfigError) as caught:
        require(_without(*hidden))
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.USAGE
    assert "\n" not in message
    assert extra in message and install in message
    assert f"no {', '.join(hidden)}," in message
    assert {m for m in (*SPARK_EXTRA_MODULES, *RELAY_EXTRA_MODULES) if m in message} == set(
        hidden)


def test_the_spark_extra_declares_every_module_the_check_looks_for() -> None:
    """Each module's distribution has its name; pandas no longer stands in for numpy."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra = {Requirement(r).name for r in project["optional-dependencies"]["spark"]}
    base = {Requirement(r).name for r in project["dependencies"]}
    assert set(SPARK_EXTRA_MODULES) <= extra
    assert not set(SPARK_EXTRA_MODULES) & base


def _hide(modules: tuple[str, ...]) -> str:
    """Before anything else, the child makes these modules unimportable: an import raises
    ImportError and find_spec answers None, as in a Python that never had them."""
    return f"import sys\nfor m in {modules!r}:\n    sys.modules[m] = None\n"


_HIDE = _hide(SPARK_EXTRA_MODULES)
_STARTS = {
    "outbox_relay.app.main": "from outbox_relay.app import main\nsys.exit(main(sys.argv[1:]))",
    "outbox-relay": "from outbox_relay.cli import main\nsys.exit(main(sys.argv[1:]))",
    "jobs/relay.py": "import runpy\nsys.argv[0] = 'jobs/relay.py'\n"
                     "runpy.run_path('jobs/relay.py', run_name='__main__')",
}


@pytest.mark.parametrize(("start", "argv"), [
    ("outbox_relay.app.main", ["--available-now"]),
    ("outbox_relay.app.main", ["--log-format", "json"]),
    ("jobs/relay.py", ["--available-now"]),
    ("outbox-relay", ["run", "--available-now"]),
    ("outbox-relay", ["ledger", "flush"]),
])
def test_each_start_of_spark_stops_with_one_line_before_importing_it(
    start: str, argv: list[str]
) -> None:
    done = subprocess.run([sys.executable, "-c", _HIDE + _STARTS[start], *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == ExitCode.USAGE, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert "[spark]" in line and INSTALL in line and "pyspark, numpy, pyarrow" in line, line


@pytest.mark.parametrize(("start", "argv"), [
    ("outbox_relay.app.main", ["--available-now"]),
    ("jobs/relay.py", ["--available-now"]),
    ("outbox-relay", ["run", "--available-now"]),
    ("outbox-relay", ["status"]),
    ("outbox-relay", ["--help"]),
    ("outbox-relay", ["metrics", "serve"]),
])
def test_each_command_stops_with_one_line_without_the_relay_extra(
    start: str, argv: list[str]
) -> None:
    """The base install (the publisher alone) has none of them: `outbox-relay` and the
    run name the extra, never a traceback of the first import that failed."""
    done = subprocess.run([sys.executable, "-c", _hide(RELAY_EXTRA_MODULES) + _STARTS[start],
                           *argv], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == ExitCode.USAGE, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    print(f"{start} {' '.join(argv)}: {line}")
    assert "[relay]" in line and RELAY_INSTALL in line, line
