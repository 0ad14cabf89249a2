"""The README's first way to run the relay, typed as written in a new shell after `make
demo`: `spark-submit jobs/relay.py --config conf/local.toml --available-now`, from the
repository's root, the venv's bin on PATH, and no RELAY_* address in the environment.

conf/local.toml names the running local stack ("local-stack"), which `make demo` or `stack
up` started on free ports: the command drains a seeded outbox of the stack's database. With
a stack dir that holds no running stack, the same command stops with one line naming
`outbox-relay stack up` (exit 11, NOT_FOUND). Before the profile found the stack, both
exited 4: it looked for PostgreSQL on 5432.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from outbox_relay.config.env import reads_variable
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.bundle import REPO
from tests.integration.helpers import consume, create_topics, every_key_shape, insert, query, unique

pytestmark = pytest.mark.integration

README_RUN = ["spark-submit", "jobs/relay.py", "--config", "conf/local.toml", "--available-now"]
MESSAGES = 30


def _new_shell(**also: str) -> dict[str, str]:
    """The environment of a new shell: no variable the profile would read (the stack's
    addresses among them), the venv's bin first on PATH as the README says."""
    env = {k: v for k, v in os.environ.items() if not reads_variable(k)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **also}


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_the_readme_run_drains_the_running_local_stack(stack: StackInfo) -> None:
    env = _new_shell()
    migrated = _run(["outbox-relay", "--config", "conf/local.toml", "migrate"], env)
    assert migrated.returncode == ExitCode.OK, migrated.stderr[-3000:]
    topic = unique("readme")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    messages = every_key_shape([topic], MESSAGES)
    ids = insert(stack.postgres_url, [messages])

    done = _run(README_RUN, env)
    print(done.stdout[-1500:])
    assert done.returncode == ExitCode.OK, done.stdout[-2000:] + done.stderr[-3000:]
    received = consume(stack.kafka_bootstrap, [topic], expect=MESSAGES)
    assert {r.outbox_id for r in received} == set(ids)
    assert query(stack.postgres_url, "SELECT count(*) FROM kafka_messages WHERE id = ANY(%s)",
                 (ids,)) == [(0,)]


def test_with_no_stack_running_the_readme_run_says_how_to_start_one(tmp_path: Path) -> None:
    stack_dir = tmp_path / "no-stack"
    done = _run(README_RUN, _new_shell(RELAY_STACK_DIR=str(stack_dir)))
    # spark-submit passes its Python's stdout and stderr on as its own stdout.
    output = done.stdout + done.stderr
    print(output[-1500:])
    assert done.returncode == ExitCode.NOT_FOUND, output[-3000:]
    assert "Traceback" not in output
    (line,) = [x for x in output.splitlines() if x.startswith("outbox-relay:")]
    assert "`outbox-relay stack up`" in line and str(stack_dir) in line, line
