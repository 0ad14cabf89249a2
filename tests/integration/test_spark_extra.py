"""The installed wheel in a Python without the `[spark]` extra.

The `[relay]` extra leaves pyspark, numpy and pyarrow to a Spark runtime or to `[spark]`.
Two venvs outside the checkout get the wheel (outbox_relay/launch/extras.py): a plain one,
as `pip install 'outbox-relay[relay]'` leaves it, and one with pyspark and pyarrow but no
numpy, which pandas used to bring. In each, the relay's run stops at start with one line that
names the missing modules and the extra (exit 2, USAGE), never a traceback: through the
`outbox-relay run` console script and through outbox_relay.app.main, which jobs/relay.py calls.
The commands that need no Spark keep working in the plain venv.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.extras import INSTALL, RELAY_EXTRA, SPARK_EXTRA_MODULES
from outbox_relay.launch.packages import SPARK_VERSION
from tests.integration.conftest import ConfigFactory
from tests.integration.process import write_profile
from tests.integration.wheel import installed, new_venv, pip_install

pytestmark = pytest.mark.integration

# What jobs/relay.py does once it has found the package.
APP_MAIN = "import sys; from outbox_relay.app import main; sys.exit(main())"


@dataclass(frozen=True)
class Venv:
    python: Path
    cwd: Path  # outside the checkout
    env: dict[str, str]
    missing: tuple[str, ...]

    def run(self, *command: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(c) for c in command], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=300, check=False)

    @property
    def cli(self) -> Path:
        return self.python.parent / "outbox-relay"


def _venv(wheel: Path, tmp: Path, *also: str) -> Venv:
    outside = tmp / "elsewhere"
    outside.mkdir()
    python, env = new_venv(tmp / "venv", outside)
    pip_install(python, f"{wheel}[{RELAY_EXTRA}]", *also, cwd=outside, env=env)
    have = installed(python, outside, env)
    missing = tuple(m for m in SPARK_EXTRA_MODULES if m not in have)
    return Venv(python, outside, env, missing)


@pytest.fixture(scope="module")
def plain(project_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    venv = _venv(project_wheel, tmp_path_factory.mktemp("plain"))
    assert venv.missing == SPARK_EXTRA_MODULES, "[relay] must bring none of them"
    return venv


@pytest.fixture(scope="module")
def without_numpy(project_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    venv = _venv(project_wheel, tmp_path_factory.mktemp("without-numpy"),
                 f"pyspark=={SPARK_VERSION}", f"pyarrow=={version('pyarrow')}")
    assert venv.missing == ("numpy",)
    return venv


@pytest.mark.parametrize("name", ["plain", "without_numpy"])
def test_the_run_without_the_spark_extra_says_so_in_one_line(
    name: str, request: pytest.FixtureRequest
) -> None:
    venv: Venv = request.getfixturevalue(name)
    for command in ((venv.cli, "run", "--available-now"),
                    (venv.python, "-c", APP_MAIN, "--available-now")):
        done = venv.run(*command)
        assert done.returncode == ExitCode.USAGE, f"{command}: {done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
        (line,) = done.stderr.strip().splitlines()
        print(f"{name}: {line}")
        assert "[spark]" in line and INSTALL in line, line
        assert {m for m in SPARK_EXTRA_MODULES if m in line} == set(venv.missing), line


def test_the_commands_without_spark_work_in_a_plain_python(
    plain: Venv, make_config: ConfigFactory, tmp_path: Path
) -> None:
    profile = write_profile(make_config(name="plain"), tmp_path / "plain.toml")
    for args in (["migrate"], ["status"], ["topics"], ["ledger", "show", "--id", "1"]):
        done = plain.run(plain.cli, "--config", profile, *args)
        assert done.returncode in (ExitCode.OK, ExitCode.NOT_FOUND), (args, done.stderr[-3000:])
        assert "Traceback" not in done.stderr, (args, done.stderr[-3000:])
