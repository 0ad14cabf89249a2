"""One relay of four outbox databases on the standalone cluster: a drain whose backlogs
the two workers' executors write, and a SIGKILL of one worker mid-backlog.

Every database is owned by the secured role, whose password only the driver has (one
variable per database, `RELAY_POSTGRES_PASSWORD_<NAME>`). The databases publish to the
same two topics; each record names its database in its source header, and each database
is judged against its own writer: nothing lost, per-key order within it, and duplicates
only of the sessions that did not end by deleting their rows (a task that the kill cut
off and Spark ran again), at most two copies each.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from outbox_relay.config import Config
from outbox_relay.config.databases import default_password_env
from outbox_relay.config.load import build_config
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.cluster.conftest import ClusterDb, owned_database
from tests.cluster.secured_db import SecuredRole
from tests.cluster.standalone import StandaloneCluster
from tests.cluster.submit import (
    cluster_config,
    placement,
    running_tasks,
    submit,
    wait_application,
)
from tests.faults.conftest import Scenario
from tests.faults.infra import create_topics, outbox_count, scalar, unique, wait_until
from tests.faults.oracle import read_all, totals, verdict
from tests.faults.outbox_writer import Outbox, traffic
from tests.faults.recorders import unfinished_claims
from tests.faults.relay_proc import relays
from tests.integration.many import by_database

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

NAMES = ("db-0", "db-1", "db-2", "db-3")
MESSAGES = 3_000  # a database
MAX_COPIES = 2  # one crash, one retry (docs/design.md, invariant 4)
SOURCE = "cmany"


@pytest.fixture(scope="module")
def four(stack: StackInfo, role: SecuredRole) -> Iterator[dict[str, ClusterDb]]:
    with contextlib.ExitStack() as held:
        yield {name: held.enter_context(owned_database(stack, role)) for name in NAMES}


def _config(dbs: dict[str, ClusterDb], stack: StackInfo, topics: Sequence[str]) -> Config:
    """The cluster tier's profile with the four databases; each one's checkpoint and
    ledger go under the profile's relative paths, in the driver's directory."""
    one = cluster_config(next(iter(dbs.values())), stack, topics, SOURCE, batch_size=500,
                         direct_max_rows=1)
    data = one.model_dump(mode="json", exclude={"postgres": {"password"}})
    data["databases"] = [{"name": name, "url": db.relay_url} for name, db in dbs.items()]
    return build_config(data, env={})


def _busy(dbs: dict[str, ClusterDb]) -> bool:
    """Some database has delivered part of its backlog and has a session in flight."""
    return any(outbox_count(db.admin_url) < MESSAGES
               and scalar(db.admin_url, "SELECT count(*) FROM relay_sessions") > 0
               for db in dbs.values())


@pytest.mark.scenario("16-cluster-many-databases-worker-kill")
def test_a_worker_killed_while_the_executors_carry_four_databases_loses_nothing_in_any(
    cluster: StandaloneCluster, relay_zip: Path, four: dict[str, ClusterDb],
    stack: StackInfo, tmp_path: Path, scenario: Scenario,
) -> None:
    topics = {unique("cmany"): 3, unique("cmany"): 4}
    create_topics(stack.kafka_bootstrap, topics)
    outboxes = {name: Outbox(db.admin_url) for name, db in four.items()}
    for k, outbox in enumerate(outboxes.values()):
        outbox.write(traffic(list(topics), MESSAGES, per_tx=50, keys=40, value_bytes=100,
                             seed=60 + k))
        outbox.close()
    config = _config(four, stack, list(topics))
    passwords = {default_password_env(name): db.password for name, db in four.items()}
    victim = cluster.live_workers()[0]
    started = time.monotonic()
    try:
        with relays() as procs:
            proc = submit(cluster, relay_zip, next(iter(four.values())), config, tmp_path,
                          "many", available_now=True, env=passwords)
            procs.append(proc)
            app_id = wait_application(cluster, config.spark.app_name, proc)
            wait_until(lambda: _busy(four) and running_tasks(cluster, victim, app_id) > 0,
                       600, "a task of a database's batch on the victim", interval_s=0.02,
                       diagnose=proc.tail)
            cluster.kill_worker(victim)
            killed_after = time.monotonic() - started
            backlog = {name: outbox_count(db.admin_url) for name, db in four.items()}
            code = proc.wait(600)
            log = proc.tail()
        drain_s = time.monotonic() - started
        interrupted = running_tasks(cluster, victim, app_id)
        records = read_all(stack.kafka_bootstrap, list(topics))
        where = placement(cluster, app_id)
    finally:
        cluster.ensure_workers(2)
    mine = by_database(records, SOURCE, NAMES)
    verdicts = {name: verdict(outboxes[name], mine.get(name, [])) for name in NAMES}
    may_repeat = {name: unfinished_claims(db.admin_url) for name, db in four.items()}
    duplicated = {name: v.duplicates for name, v in verdicts.items()}
    scenario.update(
        totals(verdicts),
        faults_injected=1, exit_code=code, drain_s=round(drain_s, 1),
        killed_after_s=round(killed_after, 1), backlog_at_kill=backlog,
        tasks_interrupted=interrupted, duplicated_per_database=duplicated, **where.figures(),
        notes=f"a drain of 4 databases x {MESSAGES} messages on the standalone cluster; "
              f"SIGKILL of {victim.name}'s JVM with {sum(backlog.values())} rows left: exit "
              f"{code}, duplicates per database {list(duplicated.values())}, each within "
              f"its unfinished sessions",
    )
    print(f"drain {drain_s:.1f} s, backlog at kill {backlog}, duplicates {duplicated}, "
          f"tasks per worker {where.tasks}")

    assert code == ExitCode.OK, log
    assert sum(where.tasks.values()) > 0, "the executors wrote no task"
    for name, v in verdicts.items():
        v.assert_clean(max_duplicates=None)
        assert v.duplicated_ids <= may_repeat[name], (name, "duplicates out of no session")
        assert max(v.copies.values(), default=1) <= MAX_COPIES, name
        assert outbox_count(four[name].admin_url) == 0, name
