"""The real entry point fails fast, before Spark starts, with one line that names the
problem, and never prints a secret."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from outbox_relay.config.load import PASSWORD_ENV
from outbox_relay.control.migrate import discover
from outbox_relay.exit_codes import ExitCode
from tests.integration.helpers import query

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = REPO / "jobs" / "relay.py"
SECRET = "Pg-s3cret-HUNTER2-7f3a9c"
# Failing before Spark starts takes well under a second plus the Kafka admin timeout;
# a started JVM alone would take longer than this.
FAST_S = 15.0


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_entry_point(profile: str, tmp_path: Path, extra_env: dict[str, str] | None = None,
                    *args: str) -> Outcome:
    config = tmp_path / "profile.toml"
    config.write_text(profile, encoding="utf-8")
    # Nothing from the caller's environment may point the relay elsewhere.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RELAY_", "PYSPARK_GATEWAY_"))}
    env.update(extra_env or {})
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ENTRY_POINT), "--config", str(config), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


def test_unknown_config_key_exits_2_naming_the_key(tmp_path: Path) -> None:
    profile = """
[relay]
source_name = "orders"
batch_sizee = 500
"""
    out = run_entry_point(profile, tmp_path)

    assert out.code == 2, out
    assert len(out.stderr_lines) == 1, out.stderr
    assert "relay.batch_sizee" in out.stderr_lines[0]
    assert "unknown" in out.stderr_lines[0]
    assert out.stdout == ""
    assert out.seconds < FAST_S


@pytest.mark.parametrize("secret_in", ["environment", "profile_url"])
def test_unreachable_postgres_is_named_and_the_password_never_printed(
    tmp_path: Path, secret_in: str
) -> None:
    port = closed_port()
    if secret_in == "environment":
        url, env = f"postgresql://relay@127.0.0.1:{port}/outbox", {PASSWORD_ENV: SECRET}
    else:
        url, env = f"postgresql://relay:{SECRET}@127.0.0.1:{port}/outbox", {}
    profile = f"""
[postgres]
url = "{url}"
connect_timeout_s = 3
[kafka]
bootstrap_servers = "127.0.0.1:{closed_port()}"
admin_timeout_s = 2
"""
    out = run_entry_point(profile, tmp_path, env, "--available-now")

    assert out.code == 4, out
    assert len(out.stderr_lines) == 1, out.stderr
    line = out.stderr_lines[0]
    assert "PostgreSQL" in line and f"127.0.0.1:{port}" in line, line
    assert SECRET not in out.stdout and SECRET not in out.stderr
    assert "s3cret" not in out.stdout + out.stderr
    assert out.seconds < FAST_S


def test_unreachable_kafka_is_named_in_one_line(tmp_path: Path, migrated_url: str) -> None:
    port = closed_port()
    profile = f"""
[postgres]
url = "{migrated_url}"
sslmode = "disable"
[kafka]
bootstrap_servers = "127.0.0.1:{port}"
admin_timeout_s = 3
"""
    out = run_entry_point(profile, tmp_path, {PASSWORD_ENV: SECRET})

    assert out.code == 4, out
    assert len(out.stderr_lines) == 1, out.stderr[:2000]
    line = out.stderr_lines[0]
    assert "Kafka" in line and f"127.0.0.1:{port}" in line, line
    assert "refused" in line, "the line says why, not only that"
    assert "PostgreSQL" not in line
    assert SECRET not in out.stdout + out.stderr
    assert out.seconds < FAST_S


@pytest.mark.parametrize("mode", [[], ["--available-now"]], ids=["continuous", "available-now"])
def test_a_run_on_an_older_schema_exits_usage_and_never_migrates(
    tmp_path: Path, migrated_url: str, mode: list[str],
) -> None:
    """The relay never migrates at its start (`outbox-relay migrate` does, and the
    bundle's and the DAG's migrate tasks): on a schema older than its own it exits with
    the code the table of docs/exit-codes.md gives that case, and leaves the schema be."""
    newest = max(m.version for m in discover())
    latest = "SELECT max(version) FROM relay_schema_migrations"
    query(migrated_url, "DELETE FROM relay_schema_migrations WHERE version = %s", (newest,))
    profile = f'''
[postgres]
url = "{migrated_url}"
sslmode = "disable"
'''
    out = run_entry_point(profile, tmp_path, None, *mode)

    assert out.code == ExitCode.USAGE, out
    assert "a database schema older than the relay's" in ExitCode.USAGE.meaning
    assert len(out.stderr_lines) == 1, out.stderr[:2000]
    assert f"the database schema is behind (at {newest - 1:04d}" in out.stderr_lines[0]
    assert out.stderr_lines[0].endswith("run `outbox-relay migrate`")
    assert query(migrated_url, latest) == [(newest - 1,)]
    assert out.seconds < FAST_S
