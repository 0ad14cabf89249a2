"""`outbox-relay run --log-format json`: every line on stderr is one JSON object, the
error that ends the run included (here PostgreSQL unreachable, before any JVM starts)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from outbox_relay.exit_codes import ExitCode


def test_a_failed_run_logs_json_only(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    profile = tmp_path / "p.toml"
    profile.write_text(f'[postgres]\nurl = "postgresql://postgres@127.0.0.1:{port}/x"\n'
                       'connect_timeout_s = 2\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    result = subprocess.run(
        [sys.executable, "-m", "outbox_relay.cli", "--config", str(profile), "run",
         "--available-now", "--log-format", "json"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.returncode == ExitCode.UNREACHABLE, result.stderr
    lines = result.stderr.splitlines()
    assert lines, "nothing logged"
    entries = [json.loads(line) for line in lines]  # fails on any line that is not JSON
    assert all({"time", "level", "logger", "message"} <= e.keys() for e in entries)
    last = entries[-1]
    assert last["level"] == "ERROR" and str(port) in last["message"], last
