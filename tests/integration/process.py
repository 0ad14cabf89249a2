"""Runs the relay the way production does: `spark-submit jobs/relay.py` in its own process group."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from outbox_relay.config import Config

REPO = Path(__file__).resolve().parents[2]


def write_profile(config: Config, path: Path) -> Path:
    """A TOML profile equivalent to `config` (no secrets: those stay in the environment)."""
    data = config.model_dump(mode="json", exclude={"postgres": {"password"}})
    return write_raw_profile(data, path)


def write_raw_profile(data: dict[str, Any], path: Path) -> Path:
    """A TOML profile of exactly `data` (e.g. a checked-in profile with a few keys changed)."""
    path.write_text(_toml(data), encoding="utf-8")
    tomllib.loads(path.read_text(encoding="utf-8"))  # fail here, not in the child
    return path


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    scalars, tables, arrays = [], [], []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            arrays.append((key, value))
        elif value is not None:
            scalars.append(f"{_key(key)} = {_value(value)}")
    out = [f"[{prefix}]"] if prefix and scalars else []
    out += scalars
    for key, value in tables:
        out.append(_toml(value, f"{prefix}.{_key(key)}" if prefix else _key(key)))
    for key, items in arrays:
        for item in items:
            name = f"{prefix}.{_key(key)}" if prefix else _key(key)
            out.append(f"[[{name}]]\n" + _toml(item).strip())
    return "\n".join(out) + "\n"


def _key(key: str) -> str:
    return key if key.replace("_", "").isalnum() else _value(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


# How spark-submit finds the relay's jars: in spark-defaults.conf (installed by `make
# setup` and by the session, tests/conftest.py), or not at all on first use, when the
# relay runs itself once more as a spark-submit that has them (outbox_relay.launch.launcher).
LAUNCH_PATHS = ("defaults", "first-use")


def launch_env(launch: str, tmp_path: Path) -> dict[str, str]:
    if launch == "defaults":
        return {}
    empty = tmp_path / "spark-conf-without-jars"
    empty.mkdir(exist_ok=True)
    return {"SPARK_CONF_DIR": str(empty)}


def spark_submit(profile: Path, *args: str, env: dict[str, str] | None = None,
                 log: Path | None = None,
                 submit_args: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """Start `spark-submit [submit_args] jobs/relay.py --config profile ...` as a process
    group leader (`submit_args` are spark-submit's own, e.g. `--master`)."""
    submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert submit, "spark-submit is installed with pyspark"
    child_env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})}
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed by the child
    return subprocess.Popen(
        [submit, *submit_args, str(REPO / "jobs" / "relay.py"), "--config", str(profile), *args],
        cwd=REPO, env=child_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    os.killpg(proc.pid, sig)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
