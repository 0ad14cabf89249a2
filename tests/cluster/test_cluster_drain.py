"""A drain on the standalone cluster: every message delivered in per-key order, and the
ledger exact, although the executors run in other JVMs, another working directory and a
clean environment, and only the driver knows the credentials: the database password and
the Kafka SASL login (a broker with SASL/PLAIN and ACLs), both from its environment.

One drain, two verdicts: an independent consumer reading back what the broker holds, and
the Delta ledger read from disk against the ids the test wrote."""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from tests.cluster.conftest import ClusterDb
from tests.cluster.standalone import StandaloneCluster
from tests.cluster.submit import (
    Placement,
    cluster_config,
    driver_dir,
    leaks,
    placement,
    submit,
    wait_application,
    with_kafka_secrets,
    worker_processes,
)
from tests.faults.conftest import Scenario
from tests.faults.infra import outbox_count, query, unique
from tests.faults.oracle import Verdict, read_all, verdict
from tests.faults.outbox_writer import Outbox, traffic
from tests.integration.sasl_broker import (
    ADMIN,
    RELAY,
    SaslBroker,
    sasl_broker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

MESSAGES = 20_000
PARTITIONS = (1, 3, 4)
# Claims above this go to Spark once the session is up; until then the driver's producer
# sends what it claims, at most this much a topic a round. At 300 the driver drained all
# 20,000 before the cluster's session was up; at one row a topic, the backlog outlasts
# that start.
DIRECT_MAX_ROWS = 1
# The driver's environment alone holds these; the profile names them as env:NAME.
JAAS_ENV, KAFKA_PASSWORD_ENV = "CLUSTER_KAFKA_JAAS", "CLUSTER_KAFKA_PASSWORD"


@dataclass
class Drained:
    config: Config
    exit_code: int
    log_tail: str
    drain_s: float
    verdict: Verdict
    placement: Placement
    leaks: list[str]
    profile_secrets: list[str]  # secrets found in the profile the driver was given
    logged_secrets: list[str]  # daemon and executor logs that hold a secret
    processes_seen: int
    ledger: Counter[tuple[str, int, str]]
    written: dict[int, str]  # id -> topic
    staged_left: int
    outbox_left: int
    stray_dirs: list[str]
    figures: dict[str, Any] = field(default_factory=dict)


def _logged(cluster: StandaloneCluster, secrets: list[str]) -> list[str]:
    """The master's, workers' and executors' logs that hold any of `secrets`."""
    logs = [*cluster.root.glob("*.log"), *cluster.root.glob("worker-*/work/*/*/std*")]
    return [str(f) for f in logs if any(x in f.read_text(errors="replace") for x in secrets)]


@pytest.fixture(scope="module")
def drained(cluster: StandaloneCluster, relay_zip: Path, cluster_db: ClusterDb,
            stack: StackInfo, spark: SparkSession, sasl_broker: SaslBroker,
            tmp_path_factory: pytest.TempPathFactory) -> Drained:
    fixture_started = time.monotonic()
    workdir = tmp_path_factory.mktemp("cluster-drain")
    topics = {unique("cluster"): n for n in PARTITIONS}
    sasl_broker.create_topics(topics)
    for topic in topics:
        sasl_broker.allow(RELAY, topic, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                          AclOperation.WRITE)
    outbox = Outbox(cluster_db.admin_url)
    outbox.write(traffic(list(topics), MESSAGES, per_tx=25, keys=30, value_bytes=100, seed=10))
    outbox.close()
    java, librdkafka = sasl_broker.java_conf(RELAY), sasl_broker.librdkafka_conf(RELAY)
    secrets = {JAAS_ENV: java["sasl.jaas.config"], KAFKA_PASSWORD_ENV: librdkafka["sasl.password"]}
    config = with_kafka_secrets(
        cluster_config(cluster_db, stack, list(topics), "drain", sasl_broker.bootstrap,
                       batch_size=700, direct_max_rows=DIRECT_MAX_ROWS),
        java={**java, "sasl.jaas.config": f"env:{JAAS_ENV}"},
        librdkafka={**librdkafka, "sasl.password": f"env:{KAFKA_PASSWORD_ENV}"})
    started = time.monotonic()
    proc = submit(cluster, relay_zip, cluster_db, config, workdir, "drain", available_now=True,
                  env=secrets)
    app_id = wait_application(cluster, config.spark.app_name, proc)
    # What the worker-side processes hold while the drain runs.
    seen = []
    while proc.alive() and time.monotonic() - started < 600:
        seen += worker_processes(cluster)
        time.sleep(0.5)
    code = proc.wait(60)
    drain_s = time.monotonic() - started
    records = read_all(sasl_broker.bootstrap, list(topics),
                       conf=sasl_broker.librdkafka_conf(ADMIN))
    ledger_path = driver_dir(workdir) / config.ledger.path
    rows = spark.read.format("delta").load(str(ledger_path)).select(
        "topic", "message_id", "outcome").collect()
    drain = Drained(
        config=config, exit_code=code, log_tail=proc.tail(), drain_s=drain_s,
        verdict=verdict(outbox, records), placement=placement(cluster, app_id),
        leaks=sorted(set(leaks(seen, [cluster_db.password, RELAY[1]], driver_dir(workdir)))),
        profile_secrets=[n for n in secrets if (workdir / "drain.toml").read_text().count(
            secrets[n])],
        logged_secrets=_logged(cluster, [cluster_db.password, RELAY[1]]),
        processes_seen=len({p.pid for p in seen}),
        ledger=Counter((r.topic, int(r.message_id), str(r.outcome)) for r in rows),
        written={i: w.msg.topic for i, w in outbox.written.items()},
        staged_left=int(query(cluster_db.admin_url,
                              "SELECT count(*) FROM relay_ledger_staging")[0][0]),
        outbox_left=outbox_count(cluster_db.admin_url),
        # A relative path resolved by an executor would land in a worker's directories.
        stray_dirs=[str(p) for name in ("ledger", "checkpoint")
                    for p in cluster.root.rglob(name)],
    )
    drain.figures = {
        **drain.verdict.figures(), "drain_s": round(drain_s, 1), "exit_code": code,
        **drain.placement.figures(), "worker_processes_checked": drain.processes_seen,
        "ledger_rows": sum(drain.ledger.values()), "staged_left": drain.staged_left,
        "cluster_start_s": round(cluster.started_s, 1),
        # The drain runs in this fixture: its time counts as the scenario's setup.
        "setup_s": round(time.monotonic() - fixture_started, 1),
    }
    return drain


@pytest.mark.scenario("10-cluster-drain")
def test_every_message_is_delivered_in_key_order_by_executors_in_the_workers(
    drained: Drained, scenario: Scenario,
) -> None:
    d = drained
    scenario.update(d.figures, faults_injected=0, notes=(
        "spark-submit --master spark://127.0.0.1 (standalone master and 2 workers of 1 core, "
        "clean env, own cwd/HOME/SPARK_LOCAL_DIRS), --available-now; executors per worker "
        f"{d.placement.executors}, tasks per worker {d.placement.tasks}; only the driver had "
        "the database password, which pg_hba required, and the Kafka SASL login, which "
        "the broker's ACLs required"))

    assert d.exit_code == ExitCode.OK, d.log_tail
    # The backlog went to the executors once the session was up; the driver's producer
    # sent only what came before (the relay's summary counts each lane).
    lanes = re.search(r"(\d+) by the driver's producer, (\d+) by Spark's executors", d.log_tail)
    assert lanes, d.log_tail
    by_driver, by_executors = int(lanes.group(1)), int(lanes.group(2))
    print(f"{by_driver} by the driver's producer, {by_executors} by the executors")
    assert by_executors > MESSAGES // 2 and by_driver + by_executors == MESSAGES
    # Executors really ran in both workers' JVMs, with the relay shipped to them.
    assert all(n >= 1 for n in d.placement.executors.values()), d.placement
    assert all(n >= 1 for n in d.placement.tasks.values()), d.placement
    assert all(d.placement.shipped.values()), d.placement
    assert d.processes_seen >= 2, "executor processes were seen under the workers"
    assert not d.leaks, d.leaks
    assert not d.profile_secrets, d.profile_secrets
    assert not d.logged_secrets, d.logged_secrets
    d.verdict.assert_clean(max_duplicates=0)  # no fault: not one duplicate
    assert d.outbox_left == 0


def test_the_ledger_is_exact_when_executors_write_it(drained: Drained) -> None:
    d = drained
    assert d.exit_code == ExitCode.OK, d.log_tail
    assert d.staged_left == 0, "the relay copied every staged record before it exited"
    ids = Counter(i for _, i, _ in d.ledger)
    assert set(ids) == set(d.written), "the ledger has every message"
    assert max(ids.values()) == 1, "the ledger has each message once"
    assert all(d.written[i] == topic for topic, i, _ in d.ledger), "under its own topic"
    assert {o for _, _, o in d.ledger} == {"published"}
    # The relative ledger and checkpoint paths resolved in the driver's directory only.
    assert not d.stray_dirs, d.stray_dirs
