"""SIGTERM to the spark-submit pid alone (what Kubernetes, Docker and supervisord send)
stops a relay whose executors run on the standalone cluster gracefully: exit 0 in
continuous mode, nothing lost or sent twice, no lock or session left, the driver's
process tree gone, and the application's executors gone from the workers."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.cluster.conftest import ClusterDb
from tests.cluster.standalone import StandaloneCluster
from tests.cluster.submit import (
    application,
    cluster_config,
    driver_dir,
    leaks,
    placement,
    submit,
    wait_application,
    worker_processes,
)
from tests.faults.conftest import Scenario
from tests.faults.infra import create_topics, outbox_count, outbox_ids, scalar, unique, wait_until
from tests.faults.oracle import read_all, verdict
from tests.faults.outbox_writer import Outbox, traffic
from tests.faults.relay_proc import _group_alive, relays

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

MESSAGES = 4_000
# The batch in flight finishes, then Spark's own stop waits up to
# spark.sql.streaming.stopTimeout (60 s, outbox_relay/launch/spark.py) for its bookkeeping.
GRACE_S = 90.0
# A stop that waited out stopTimeout was stuck (a batch body blocked on the runner that
# was stopping the query, fixed in outbox_relay/stream/stop.py): well under it, with room for
# a batch in flight on a loaded machine.
MAX_STOP_S = 45.0


@pytest.mark.scenario("10-cluster-stop-signal")
def test_sigterm_to_the_spark_submit_pid_stops_the_cluster_relay_gracefully(
    cluster: StandaloneCluster, relay_zip: Path, cluster_db: ClusterDb, stack: StackInfo,
    tmp_path: Path, scenario: Scenario,
) -> None:
    url = cluster_db.admin_url
    topics = {unique("cstop"): 3, unique("cstop"): 2}
    create_topics(stack.kafka_bootstrap, topics)
    outbox = Outbox(url)
    outbox.write(traffic(list(topics), MESSAGES, per_tx=50, keys=30, value_bytes=100, seed=11))
    outbox.close()
    # Claims of 200 are the executors' (direct_max_rows 1): otherwise the driver's
    # producer can send the whole backlog before Spark is up, and the stop meets no
    # executor at work.
    config = cluster_config(cluster_db, stack, list(topics), "stop", batch_size=200,
                            direct_max_rows=1)
    started = time.monotonic()
    with relays() as procs:
        proc = submit(cluster, relay_zip, cluster_db, config, tmp_path, "stop")
        procs.append(proc)
        app_id = wait_application(cluster, config.spark.app_name, proc)
        # Rows leaving the outbox: batches are flowing, a write is in flight or next.
        wait_until(lambda: outbox_count(url) < MESSAGES - 400, 600,
                   "the relay to be relaying", diagnose=proc.tail)
        seen = worker_processes(cluster)
        os.kill(proc.pid, signal.SIGTERM)  # that one pid, not its group
        signalled = time.monotonic()
        code = proc.wait(GRACE_S)
        stop_s = time.monotonic() - signalled
        wait_until(lambda: not _group_alive(proc.pid), 30, "the driver's process tree to end")
    # The application ended at the master, and its executors left the workers.
    wait_until(lambda: (application(cluster, config.spark.app_name) or {}).get("state")
               == "FINISHED", 60, "the master to see the application finish")
    wait_until(lambda: not worker_processes(cluster), 60, "the executors to exit")
    left = outbox_ids(url)
    v = verdict(outbox, read_all(stack.kafka_bootstrap, list(topics)),
                expected=outbox.ids() - left)
    locks = scalar(url, "SELECT count(*) FROM kafka_topic_info WHERE locked_by IS NOT NULL")
    sessions = scalar(url, "SELECT count(*) FROM relay_sessions")
    where = placement(cluster, app_id)
    found = leaks(seen, [cluster_db.password], driver_dir(tmp_path))
    scenario.update(
        v.figures(), faults_injected=1, exit_code=code, stop_s=round(stop_s, 1),
        left_in_outbox=len(left), locks_left=locks, sessions_left=sessions,
        run_s=round(signalled - started, 1), **where.figures(),
        notes=f"SIGTERM to the spark-submit pid of a continuous relay on the cluster: exit "
              f"{code} (0 expected) {stop_s:.1f} s after the signal (under {MAX_STOP_S:.0f}); "
              f"{len(left)} rows left for the next run, none lost, no duplicate, no lock held")

    assert code == ExitCode.OK, proc.tail()
    assert stop_s < MAX_STOP_S, f"the stop took {stop_s:.0f} s\n{proc.tail()}"
    assert all(n >= 1 for n in where.executors.values()), where
    assert not found, found
    assert locks == 0, "a lock was left held"
    assert sessions == 0, "a session was left open"
    # What left the outbox was delivered exactly once; what is still there was not sent.
    v.assert_clean(max_duplicates=0)
    assert not set(v.copies) & left, "a row still in the outbox was sent"
