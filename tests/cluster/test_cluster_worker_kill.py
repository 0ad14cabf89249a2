"""SIGKILL of one worker JVM during a drain on the standalone cluster, as a node crash.

The worker's executor notices its worker is gone and exits; the tasks it ran fail, and
Spark runs them again on the other worker's executor. Nothing may be lost, and the
duplicates stay within the bound of docs/design.md, invariant 4: duplicates arise only from a
retry, or from a crash between Kafka's acknowledgement and the delete's commit. A retried
task re-sends its whole partition, so here:

- every duplicated message belongs to a session that was in flight (claimed, not yet
  deleted) when the worker died, and
- each message arrives at most twice: one crash, one retry of what it interrupted.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.cluster.conftest import ClusterDb
from tests.cluster.standalone import StandaloneCluster
from tests.cluster.submit import (
    cluster_config,
    placement,
    running_tasks,
    submit,
    wait_application,
    worker_processes,
)
from tests.faults.conftest import Scenario
from tests.faults.infra import create_topics, outbox_count, query, scalar, unique, wait_until
from tests.faults.oracle import read_all, verdict
from tests.faults.outbox_writer import Outbox, traffic
from tests.faults.relay_proc import relays

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

MESSAGES = 6_000
MAX_COPIES = 2  # the bound above: one crash, one retry

NOW = "SELECT clock_timestamp() AT TIME ZONE 'UTC'"
# Sessions claimed by the time of the kill and not ended before it, by the database's
# clock (the recorders stamp every claim and every end of a session).
IN_FLIGHT = """
SELECT c.ids FROM fault_fence_events c
WHERE c.kind = 'claim' AND c.at <= %(after)s AND NOT EXISTS (
    SELECT 1 FROM fault_fence_events e
    WHERE e.kind = 'session_end' AND e.session_id = c.session_id AND e.at < %(before)s)
"""


def _in_flight(url: str, before: datetime, after: datetime) -> set[int]:
    rows = query(url, IN_FLIGHT, {"before": before, "after": after})
    return {i for (ids,) in rows for i in ids}


@pytest.mark.scenario("10-cluster-worker-kill")
def test_sigkill_of_a_worker_during_a_drain_loses_nothing_and_bounds_duplicates(
    cluster: StandaloneCluster, relay_zip: Path, cluster_db: ClusterDb, stack: StackInfo,
    tmp_path: Path, scenario: Scenario,
) -> None:
    url = cluster_db.admin_url
    topics = {unique("ckill"): 3, unique("ckill"): 4}
    create_topics(stack.kafka_bootstrap, topics)
    outbox = Outbox(url)
    outbox.write(traffic(list(topics), MESSAGES, per_tx=50, keys=40, value_bytes=100, seed=12))
    outbox.close()
    # Claims of 500 are Spark's once its session is up: the kill meets the executors'
    # writes. Until then the driver's producer sends one row a topic a round, so the
    # backlog outlasts that start (at 100, and at the default, it drained all before).
    config = cluster_config(cluster_db, stack, list(topics), "kill", batch_size=500,
                            direct_max_rows=1)
    victim = cluster.live_workers()[0]
    started = time.monotonic()
    try:
        with relays() as procs:
            proc = submit(cluster, relay_zip, cluster_db, config, tmp_path, "kill",
                          available_now=True)
            procs.append(proc)
            app_id = wait_application(cluster, config.spark.app_name, proc)
            # A batch already done, a session in flight and a task of it running in the
            # victim's executor: the kill interrupts work, not an idle executor.
            wait_until(lambda: outbox_count(url) < MESSAGES
                       and scalar(url, "SELECT count(*) FROM relay_sessions") > 0
                       and running_tasks(cluster, victim, app_id) > 0,
                       600, "a task of a batch in flight on the victim", interval_s=0.02,
                       diagnose=proc.tail)
            executors = [p.pid for p in worker_processes(cluster, [victim])]
            assert executors, "the victim runs an executor of the relay"
            before = scalar(url, NOW)
            cluster.kill_worker(victim)
            after = scalar(url, NOW)
            killed_at = time.monotonic()
            outbox_at_kill = outbox_count(url)
            code = proc.wait(600)
        drain_s = time.monotonic() - started
        # Tasks the victim's executor had started and never finished: cut off by the kill.
        interrupted = running_tasks(cluster, victim, app_id)
        in_flight = _in_flight(url, before, after)
        # The executors of the dead worker exit on their own; none is left orphaned.
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in executors),
                   120, "the dead worker's executor to exit")
        alive_workers = cluster.alive_workers()
        records = read_all(stack.kafka_bootstrap, list(topics))
        v = verdict(outbox, records)
        where = placement(cluster, app_id)
    finally:
        # A replacement, so later tests have two workers again.
        cluster.ensure_workers(2)
    stray = sorted(i for i in v.duplicated_ids if i not in in_flight)
    over = sorted(i for i, n in v.copies.items() if n > MAX_COPIES)
    scenario.update(
        v.figures(), faults_injected=1, exit_code=code, drain_s=round(drain_s, 1),
        killed_after_s=round(killed_at - started, 1), outbox_at_kill=outbox_at_kill,
        in_flight_at_kill=len(in_flight), tasks_interrupted=interrupted,
        duplicated_not_in_flight=len(stray),
        workers_alive_after_kill=alive_workers, **where.figures(),
        notes=f"SIGKILL of {victim.name}'s JVM during an available-now drain: exit {code}, "
              f"{interrupted} running task(s) cut off and run again, {v.duplicates} duplicates, "
              f"all within the {len(in_flight)} messages in flight at the kill and at most "
              f"{MAX_COPIES} copies each (docs/design.md, invariant 4); the other worker finished")

    assert code == ExitCode.OK, proc.tail()
    assert alive_workers == 1, "the master kept the other worker"
    assert interrupted >= 1, "the kill cut off a running task, which Spark ran again"
    v.assert_clean(max_duplicates=None)
    assert not stray, f"duplicated although not in flight at the kill: {stray[:10]}"
    assert not over, f"more than {MAX_COPIES} copies: {over[:10]}"
    assert outbox_count(url) == 0
    assert scalar(url, "SELECT count(*) FROM relay_sessions") == 0
