"""A stop signal that meets a ledger copy: the copy's Spark job ends before the Spark
context stops, so a clean stop logs no ERROR, and one line says what stays staged."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import psycopg2
import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import Msg, create_topics, insert, query, unique, wait_for
from tests.integration.process import kill_group, spark_submit, write_profile

pytestmark = pytest.mark.integration

ROWS = 600
# The copy's Spark job reading staging, waiting for the test's table lock.
COPY_READ_WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
  AND query LIKE '%%relay_ledger_staging%%' AND pid <> pg_backend_pid()
"""
LEFT_STAGED = re.compile(r"ledger: (\d+) staged records? \((\d+) messages?\) stay")


def _outbox(url: str, topic: str, n: int) -> None:
    """Keys of every shape: NULL, text, binary; partition_key NULL or set."""
    keys = [None, b"k", b"\x00\xff"]
    insert(url, [[Msg(topic, keys[i % 3], f"v{i}".encode(),
                      partition_key=None if i % 2 else f"p{i % 7}")
                  for i in range(j, j + 100)] for j in range(0, n, 100)])


# Each writer's copy reads staging first (Spark: a job's JDBC read; delta-rs: the
# driver's query), so the lock below holds either in flight.
@pytest.mark.parametrize("writer", ["spark", "delta-rs"])
def test_a_sigterm_during_a_ledger_copy_stops_cleanly(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
    writer: str,
) -> None:
    topic = unique("copy-stop")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    _outbox(migrated_url, topic, ROWS)
    config = make_config([topic], ledger={"writer": writer})
    log = tmp_path / "relay.log"
    held = tmp_path / "hold-copy"
    text = lambda: log.read_text(errors="replace")  # noqa: E731
    proc = spark_submit(write_profile(config, tmp_path / "relay.toml"), log=log,
                        env={"RELAY_FAILPOINTS": "ledger_copy_held",
                             "RELAY_FAILPOINT_HOLD": str(held)})
    holder = psycopg2.connect(migrated_url)
    try:
        # The first copy (it loads Delta into the JVM) goes through; the next is held
        # before its write.
        assert wait_for(lambda: "copy batch 1 is in Delta" in text(), 300, 0.1), text()[-3000:]
        held.touch()
        _outbox(migrated_url, topic, ROWS)
        assert wait_for(lambda: "failpoint ledger_copy_held" in text(), 120, 0.1), text()[-3000:]
        # Its Spark job's read of staging now waits for this lock: a job in flight.
        holder.cursor().execute("LOCK TABLE relay_ledger_staging IN ACCESS EXCLUSIVE MODE")
        held.unlink()
        assert wait_for(lambda: query(migrated_url, COPY_READ_WAITING)[0][0] > 0, 120, 0.1), \
            text()[-3000:]
        proc.send_signal(signal.SIGTERM)  # the pid a supervisor signals
        signalled = time.monotonic()
        assert wait_for(lambda: "stop requested" in text(), 60, 0.1), text()[-3000:]
        holder.rollback()  # the copy may go on now, while the relay stops
        code = proc.wait(timeout=180)
        print(f"exit {code} {time.monotonic() - signalled:.1f} s after the signal")
    finally:
        holder.close()
        kill_group(proc)
    out = text()
    errors = [line for line in out.splitlines() if "ERROR" in line]
    after_stop = out[out.find("stop requested"):].splitlines()
    print("\n".join(line[:300] for line in after_stop if "\tat " not in line)[-8000:])
    assert code == ExitCode.OK, out[-3000:]
    assert not errors, f"{len(errors)} ERROR lines, the first: {errors[:3]}"
    said = LEFT_STAGED.findall(out)
    assert len(said) == 1, out[-3000:]
    records, messages = (int(n) for n in said[0])
    staged = query(migrated_url, "SELECT count(*), coalesce(sum(cardinality(ids)), 0) "
                                 "FROM relay_ledger_staging")[0]
    assert (records, messages) == tuple(staged)
