"""The project's wheel, built from the checked-in sources and installed into a venv of its
own, run from a directory outside the checkout (test_wheel_install, test_spark_extra)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.bundle import REPO


def run_ok(*command: str | Path, cwd: Path, env: dict[str, str] | None = None,
           timeout: float = 600) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


def build_wheel(tmp: Path) -> Path:
    """The wheel of the checked-in sources. Built from a copy: a checkout's build/ may hold
    modules since removed, which setuptools would put in the wheel too."""
    src = tmp / "src"
    shutil.copytree(REPO / "outbox_relay", src / "outbox_relay",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    run_ok(sys.executable, "-m", "build", "--wheel", "--outdir", tmp / "dist", src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("outbox_relay-*.whl")
    return wheel


def wheel_requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    return [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]


def installed(python: Path, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """Every distribution of the venv and its version (`pip list`, which, unlike `pip
    freeze`, gives a wheel installed from a file its version too)."""
    listed = json.loads(run_ok(python, "-m", "pip", "list", "--format=json", cwd=cwd, env=env))
    return {canonicalize_name(d["name"]): d["version"] for d in listed}


def clean_env(venv: Path) -> dict[str, str]:
    """No path back to the checkout or the test's own Python."""
    drop = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV",
            "SPARK_HOME", "SPARK_CONF_DIR")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("RELAY_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def new_venv(venv: Path, cwd: Path) -> tuple[Path, dict[str, str]]:
    """A fresh venv (pip only) and the clean environment to run its programs in: its
    Python and that environment."""
    run_ok(sys.executable, "-m", "venv", venv, cwd=cwd)
    return venv / "bin" / "python", clean_env(venv)


def pip_install(python: Path, *what: str | Path, cwd: Path, env: dict[str, str]) -> None:
    run_ok(python, "-m", "pip", "--disable-pip-version-check", "--quiet", "install", *what,
           cwd=cwd, env=env)
