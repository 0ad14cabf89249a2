"""The DAG file parses without import errors, and both DAGs have the agreed shape: the
spark-submit tasks in a pool of their own, the Databricks task deferrable and by job id,
a failure notifier on every task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.models.dagbag import DagBag
from airflow.providers.databricks.operators.databricks import DatabricksRunNowOperator
from outbox_relay_operators import RelaySparkSubmitOperator

from tests.airflow.conftest import DAGS, REPO

EVERY_5_MINUTES = "*/5 * * * *"


@pytest.fixture(scope="module")
def bag() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


def test_the_dag_file_imports_cleanly(bag: DagBag) -> None:
    assert bag.import_errors == {}
    assert set(bag.dags) == {"outbox_relay_drain", "outbox_relay_databricks"}


# Parsed in a process of its own whose sys.path is Python's plus the DAGs folder, appended
# as Airflow's DAG bag of a bundle appends it (dag_processing/dagbag.py, BundleDagBag):
# this tier's own sys.path starts with the checkout, where `outbox_relay` is the package.
PARSE = """
import json, sys
sys.path.append(sys.argv[1])
from airflow.models.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"errors": bag.import_errors, "dags": sorted(bag.dags)}))
"""


def test_the_dags_import_with_the_dags_folder_on_the_path_as_airflow_puts_it(
        tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PARSE, str(DAGS)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed == {"errors": {}, "dags": ["outbox_relay_databricks", "outbox_relay_drain"]}


@pytest.mark.parametrize("dag_id", ["outbox_relay_drain", "outbox_relay_databricks"])
def test_a_drain_every_5_minutes_one_at_a_time_without_catchup(bag: DagBag, dag_id: str) -> None:
    dag = bag.dags[dag_id]

    # The SDK's timetable (3.1 and later) has `expression`; 3.0's, the scheduler's, `summary`.
    timetable = dag.timetable
    assert (getattr(timetable, "expression", None) or timetable.summary) == EVERY_5_MINUTES
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert all(task.retries >= 1 for task in dag.tasks)


def test_the_spark_dag_migrates_then_drains_available_now(bag: DagBag) -> None:
    dag = bag.dags["outbox_relay_drain"]
    migrate, drain = dag.get_task("migrate"), dag.get_task("drain")

    assert isinstance(migrate, RelaySparkSubmitOperator)
    assert isinstance(drain, RelaySparkSubmitOperator)
    assert drain.upstream_task_ids == {"migrate"}
    assert migrate.upstream_task_ids == set()
    assert Path(migrate.application) == REPO / "jobs" / "migrate.py"
    assert Path(drain.application) == REPO / "jobs" / "relay.py"
    assert "--available-now" in drain.application_args
    assert "--available-now" not in migrate.application_args
    assert migrate.application_args[:2] == drain.application_args[:2]  # the same --config


def test_the_drain_stops_by_its_time_budget_before_its_timeout(bag: DagBag) -> None:
    """The margin docs/operating.md gives above a drain's budget: the writes in flight
    (kafka.delivery_timeout_ms, 120 s by default) and 60 s for the rest."""
    drain = bag.dags["outbox_relay_drain"].get_task("drain")
    args = drain.application_args
    budget_s = float(args[args.index("--time-budget-s") + 1])

    assert 0 < budget_s <= drain.execution_timeout.total_seconds() - 180


def test_the_spark_submit_tasks_take_a_slot_of_their_pool(bag: DagBag) -> None:
    # Client mode runs each driver's JVM on the worker: the pool bounds how many at once.
    spark = bag.dags["outbox_relay_drain"]
    (databricks,) = bag.dags["outbox_relay_databricks"].tasks

    assert {(t.task_id, t.pool, t.pool_slots) for t in spark.tasks} == {
        ("migrate", "outbox_relay_spark", 1), ("drain", "outbox_relay_spark", 1)}
    assert databricks.pool == "default_pool"  # deferred: no JVM, and no slot while it waits


@pytest.mark.parametrize("dag_id", ["outbox_relay_drain", "outbox_relay_databricks"])
def test_every_task_notifies_its_final_failure(bag: DagBag, dag_id: str) -> None:
    for task in bag.dags[dag_id].tasks:
        callbacks = task.on_failure_callback
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
        assert "RelayFailureNotifier" in {type(c).__name__ for c in callbacks}, task.task_id


def test_the_databricks_task_defers_and_names_the_job_by_id(bag: DagBag) -> None:
    (task,) = bag.dags["outbox_relay_databricks"].tasks

    assert task.deferrable is True  # the triggerer waits for the run, not a worker slot
    # Development mode prefixes a deployed job's name ("[dev user] ..."); the id stays.
    assert task.job_name is None
    assert "job_name" not in (task.json or {})
    assert task.job_id == "{{ var.value.outbox_relay_databricks_job_id }}"


def _drain_job() -> dict[str, Any]:
    jobs = yaml.safe_load((REPO / "resources" / "outbox_relay.job.yml").read_text())
    return jobs["resources"]["jobs"]["outbox_relay_drain"]


def _parameters(task: dict[str, Any]) -> list[str]:
    kind = task.get("spark_python_task") or task.get("python_wheel_task") or {}
    return [str(p) for p in kind.get("parameters", [])]


def test_the_databricks_dag_runs_the_bundles_drain_job_which_migrates_first(bag: DagBag) -> None:
    (task,) = bag.dags["outbox_relay_databricks"].tasks
    tasks = {t["task_key"]: t for t in _drain_job()["tasks"]}

    assert isinstance(task, DatabricksRunNowOperator)
    # The job's run is the unit Airflow triggers: migrate, then the available-now drain.
    (drain_key,) = [k for k, t in tasks.items() if "--available-now" in _parameters(t)]
    (migrate_key,) = [d["task_key"] for d in tasks[drain_key].get("depends_on", [])]
    assert "migrate" in yaml.safe_dump(tasks[migrate_key])
