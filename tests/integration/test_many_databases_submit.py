"""A relay of several databases launched as production launches it (spark-submit), in an
environment that names a database of its own, as `outbox-relay stack up`'s exports and
most deployments do: each database's streaming source must poll that database, not the
environment's. It did not: every source polled the environment's (empty) outbox, and a
drain's query ended at once, its first micro-batch the only one (which a new checkpoint
runs whatever the source says). So a second drain on the same checkpoints left its
backlog and exited 1, and a continuous relay delivered nothing more once its first
micro-batch ended (after `relay.micro_batch_s`)."""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from outbox_relay.cli import main as cli_main
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.integration.helpers import (
    Msg,
    consume,
    create_topics,
    every_key_shape,
    insert,
    query,
    unique,
    wait_for,
)
from tests.integration.many import Databases, check_delivery, migrate_url, profile_data
from tests.integration.process import kill_group, signal_group, spark_submit, write_raw_profile

pytestmark = pytest.mark.integration

# Rows per database and drain: many rounds of BATCH rows, more than the driver's producer
# sends (one row a round, direct_max_rows) while the session starts.
ROWS = 1200
BATCH = 100
DRAIN_TIMEOUT_S = 300


def test_drains_of_several_databases_each_drain_their_own_outbox_again_and_again(
    stack: StackInfo, databases: Databases, tmp_path: Path,
) -> None:
    relayed, elsewhere, profile, topic = _setup(stack, databases, tmp_path)
    written: dict[str, dict[int, Msg]] = defaultdict(dict)

    for run in (1, 2):  # the second resumes the first's checkpoints
        _write(relayed, topic, written)
        log = tmp_path / f"drain-{run}.log"
        proc = spark_submit(profile, "--available-now", log=log,
                            env={"RELAY_POSTGRES_URL": elsewhere})
        try:
            code = proc.wait(timeout=DRAIN_TIMEOUT_S)
        finally:
            kill_group(proc)
        tail = log.read_text(errors="replace")[-3000:]
        assert code == ExitCode.OK, f"drain {run} exited {code}:\n{tail}"
        assert _empty(relayed), run

    _check(stack, topic, written)


def test_a_continuous_relay_of_several_databases_delivers_after_its_first_micro_batch(
    stack: StackInfo, databases: Databases, tmp_path: Path,
) -> None:
    relayed, elsewhere, profile, topic = _setup(stack, databases, tmp_path, micro_batch_s=3)
    written: dict[str, dict[int, Msg]] = defaultdict(dict)
    _write(relayed, topic, written)
    log = tmp_path / "continuous.log"
    proc = spark_submit(profile, log=log, env={"RELAY_POSTGRES_URL": elsewhere})
    try:
        assert wait_for(lambda: _empty(relayed), DRAIN_TIMEOUT_S, 0.5), "the first backlog"
        time.sleep(5)  # past the first micro-batch: the next ones come when the source says
        _write(relayed, topic, written)
        assert wait_for(lambda: _empty(relayed), 60, 0.5), \
            f"the second backlog waits:\n{log.read_text(errors='replace')[-3000:]}"
    finally:
        signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            kill_group(proc)

    _check(stack, topic, written)


def _setup(stack: StackInfo, databases: Databases, tmp_path: Path, **relay: Any
           ) -> tuple[list[tuple[str, str]], str, Path, str]:
    """Two databases relayed, and a third the environment names: (those two, its URL,
    the profile, the topic)."""
    *relayed, (_, elsewhere) = databases(3)
    topic = unique("submit-many")
    create_topics(stack.kafka_bootstrap, {topic: 3})
    data = profile_data(stack, tmp_path, relayed, [topic], batch_size=BATCH, direct_max_rows=1,
                        **relay)
    profile = write_raw_profile(data, tmp_path / "many.toml")
    assert cli_main(["--config", str(profile), "migrate"]) == ExitCode.OK
    migrate_url(elsewhere)
    return relayed, elsewhere, profile, topic


def _write(relayed: list[tuple[str, str]], topic: str,
           written: dict[str, dict[int, Msg]]) -> None:
    for name, url in relayed:
        msgs = every_key_shape([topic], ROWS)
        ids = insert(url, [msgs[i:i + 100] for i in range(0, len(msgs), 100)])
        written[name].update(zip(ids, msgs, strict=True))


def _empty(relayed: list[tuple[str, str]]) -> bool:
    return all(query(url, "SELECT count(*) FROM kafka_messages") == [(0,)]
               for _, url in relayed)


def _check(stack: StackInfo, topic: str, written: dict[str, dict[int, Msg]]) -> None:
    total = sum(len(m) for m in written.values())
    check_delivery(written, consume(stack.kafka_bootstrap, [topic], expect=total, timeout_s=60))
