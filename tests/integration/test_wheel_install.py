"""The project's wheel, installed as a cluster installs a library: into a Python that
already holds the runtime's PySpark, Delta, pyarrow and pandas.

`python -m build --wheel` makes the wheel. A fresh venv gets the runtime's packages first
(pyspark and delta-spark at relay/launch/packages.py's versions, pyarrow and pandas at this
environment's); installing the wheel must change none of them, and the wheel must
require only the base dependencies. Then that venv drains a seeded outbox with the
INSTALLED relay (its `outbox-relay` entry point, from a directory outside the checkout,
without PYTHONPATH), the jars coming from the local cache as a cluster's libraries do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from relay.exit_codes import ExitCode
from relay.launch.packages import DELTA_VERSION, SPARK_VERSION
from relay.launch.spark_jars import cached_jars
from relay.stack import StackInfo
from tests.bundle import REPO
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import (
    consume,
    create_topics,
    every_key_shape,
    insert,
    order_report,
    query,
    unique,
)
from tests.integration.process import write_profile

pytestmark = pytest.mark.integration

BASE = {"confluent-kafka", "deltalake", "prometheus-client", "psycopg2-binary", "pydantic"}
MESSAGES = 60
# What a runtime ships; pip must leave every one of them as it found it.
RUNTIME = (f"pyspark=={SPARK_VERSION}", f"delta-spark=={DELTA_VERSION}",
           f"pyarrow=={version('pyarrow')}", f"pandas=={version('pandas')}")


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 600) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


def _build_wheel(tmp: Path) -> Path:
    """The wheel of the checked-in sources. Built from a copy: a checkout's build/ may hold
    modules since removed, which setuptools would put in the wheel too."""
    src = tmp / "src"
    shutil.copytree(REPO / "relay", src / "relay",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    _run(sys.executable, "-m", "build", "--wheel", "--outdir", tmp / "dist", src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("outbox_relay-*.whl")
    return wheel


def _requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    return [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]


def _installed(python: Path, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """Every distribution of the venv and its version (`pip list`, which, unlike `pip
    freeze`, gives a wheel installed from a file its version too)."""
    listed = json.loads(_run(python, "-m", "pip", "list", "--format=json", cwd=cwd, env=env))
    return {canonicalize_name(d["name"]): d["version"] for d in listed}


def _clean_env(venv: Path) -> dict[str, str]:
    """No path back to the checkout or the test's own Python."""
    drop = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV",
            "SPARK_HOME", "SPARK_CONF_DIR")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("RELAY_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_pyproject_declares_only_the_base_dependencies() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert {canonicalize_name(Requirement(d).name)
            for d in declared["project"]["dependencies"]} == BASE


def test_the_installed_wheel_keeps_the_runtime_and_drains(
    stack: StackInfo, make_config: ConfigFactory, migrated_url: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    wheel = _build_wheel(tmp_path)
    unconditional = {canonicalize_name(r.name) for r in _requires(wheel) if r.marker is None}
    assert unconditional == BASE

    venv, outside = tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    _run(sys.executable, "-m", "venv", venv, cwd=outside)
    env = _clean_env(venv)
    python = venv / "bin" / "python"
    pip = (python, "-m", "pip", "--disable-pip-version-check", "--quiet", "install")
    _run(*pip, *RUNTIME, cwd=outside, env=env)
    before = _installed(python, outside, env)
    _run(*pip, wheel, cwd=outside, env=env)
    after = _installed(python, outside, env)
    changed = {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}
    assert not changed, f"pip changed the runtime's packages: {changed}"
    assert set(after) - set(before) >= {canonicalize_name(n) for n in BASE} | {"outbox-relay"}
    installed_in = time.monotonic() - started

    where = _run(python, "-c", "import relay; print(relay.__file__)", cwd=outside, env=env)
    assert Path(where.strip()).is_relative_to(venv), where

    topic = unique("wheel")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    # Every key shape: partition_key NULL, equal to the key, different; NULL and binary keys.
    messages = every_key_shape([topic], MESSAGES)
    ids = insert(migrated_url, [messages])
    jars = ",".join(str(p) for p in cached_jars())
    config = make_config([topic], name="wheel",
                         spark={"resolve_packages": False, "conf": {"spark.jars": jars}})
    profile = write_profile(config, tmp_path / "wheel.toml")
    done = subprocess.run([str(venv / "bin" / "outbox-relay"), "--config", str(profile), "run",
                           "--available-now"], cwd=outside, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == ExitCode.OK, done.stdout[-2000:] + done.stderr[-3000:]

    received = consume(stack.kafka_bootstrap, [topic], expect=MESSAGES)
    assert {r.outbox_id for r in received} == set(ids)
    inversions, spread, _ = order_report(dict(zip(ids, messages, strict=True)), received)
    assert (inversions, spread) == (0, 0), "per-key order"
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages") == [(0,)]
    print(f"wheel built and installed in {installed_in:.1f} s, "
          f"whole test {time.monotonic() - started:.1f} s")
