"""`pip install outbox-relay`, as an application installs it: the base wheel alone.

Into an empty venv outside the checkout: the base must bring no other distribution (no
Kafka client, no Delta library, no database driver, no Prometheus client, not even
pydantic). The application then installs its own driver, psycopg 3, and publishes through
it into the real database, asserting with the pytest fixture's `Outbox` in the same
transaction; the row is read back here after the commit. A relay command in that venv
stops with one line naming the extra to install (exit 2), never a traceback.
"""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.extras import INSTALL, RELAY_INSTALL
from tests.integration.helpers import query, unique
from tests.integration.wheel import installed, new_venv, pip_install

pytestmark = pytest.mark.integration

# What the application runs, with its own psycopg 3: a publish and the fixture's assertion
# in one transaction; then which of the relay's runtime modules got loaded (none may be).
PUBLISH = """
import json, sys
import psycopg
import outbox_relay
from outbox_relay.testing import Outbox

url, topic = sys.argv[1:3]
with psycopg.connect(url) as conn, conn.transaction():
    id_ = outbox_relay.publish(conn, topic, b'{"id": 42}', key="order-42",
                               headers={"trace-id": "t-42"})
    Outbox().assert_published(conn, topic, key="order-42", json={"id": 42}, count=1)
runtime = ("pydantic", "pydantic_settings", "psycopg2", "confluent_kafka", "deltalake",
           "prometheus_client", "pyspark", "asyncpg", "sqlalchemy")
print(json.dumps({"id": id_, "loaded": sorted({m.split(".")[0] for m in sys.modules}
                                              & set(runtime))}))
"""
PLUGIN = ("from importlib.metadata import entry_points; "
          "print([e.value for e in entry_points(group='pytest11') if e.name == 'outbox_relay'])")
APP_MAIN = "import sys; from outbox_relay.app import main; sys.exit(main())"


def test_the_base_wheel_brings_nothing_else_and_publishes_through_psycopg3(
    project_wheel: Path, migrated_url: str, tmp_path: Path
) -> None:
    outside = tmp_path / "app"
    outside.mkdir()
    python, env = new_venv(tmp_path / "venv", outside)
    before = installed(python, outside, env)
    pip_install(python, project_wheel, cwd=outside, env=env)
    brought = sorted(set(installed(python, outside, env)) - set(before))
    print(f"pip install outbox-relay brought: {brought}")
    assert brought == ["outbox-relay"]

    def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(c) for c in command], cwd=outside, env=env,
                              capture_output=True, text=True, timeout=300, check=False)

    plugin = run(python, "-c", PLUGIN)
    assert plugin.stdout.strip() == "['outbox_relay.testing.pytest_plugin']", plugin.stderr

    # jobs/relay.py's main asks for [spark] first: it brings [relay] too.
    for command, hint in (((python.parent / "outbox-relay", "status"), RELAY_INSTALL),
                          ((python.parent / "outbox-relay", "run", "--available-now"),
                           RELAY_INSTALL),
                          ((python, "-c", APP_MAIN, "--available-now"), INSTALL)):
        done = run(*command)
        assert done.returncode == ExitCode.USAGE, f"{command}: {done.stderr[-3000:]}"
        (line,) = done.stderr.strip().splitlines()
        print(f"{Path(command[0]).name}: {line}")
        assert hint in line, line

    # The application's own driver, at the version this project tests the publisher with.
    pip_install(python, f"psycopg[binary]=={version('psycopg')}", cwd=outside, env=env)
    topic = unique("base")
    done = run(python, "-c", PUBLISH, migrated_url, topic)
    assert done.returncode == 0, done.stderr[-3000:]
    published = json.loads(done.stdout)
    assert published["loaded"] == [], "the publisher loaded the relay's runtime"
    rows = query(migrated_url, "SELECT id, topic, key, message, headers FROM kafka_messages "
                 "WHERE topic = %s", (topic,))
    assert [(r[0], r[1], bytes(r[2]), bytes(r[3]), r[4]) for r in rows] == [
        (published["id"], topic, b"order-42", b'{"id": 42}', {"trace-id": "t-42"})]
