"""The DAG file parses without import errors, and both DAGs have the agreed shape."""

from __future__ import annotations

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


@pytest.mark.parametrize("dag_id", ["outbox_relay_drain", "outbox_relay_databricks"])
def test_a_drain_every_5_minutes_one_at_a_time_without_catchup(bag: DagBag, dag_id: str) -> None:
    dag = bag.dags[dag_id]

    assert dag.timetable.expression == EVERY_5_MINUTES
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
    assert drain.application_args[-1] == "--available-now"
    assert "--available-now" not in migrate.application_args
    assert migrate.application_args[:2] == drain.application_args[:2]  # the same --config
    assert drain.execution_timeout is not None


def _drain_job() -> dict[str, Any]:
    jobs = yaml.safe_load((REPO / "resources" / "outbox_relay.job.yml").read_text())
    return jobs["resources"]["jobs"]["outbox_relay_drain"]


def test_the_databricks_dag_runs_the_bundles_drain_job_which_migrates_first(bag: DagBag) -> None:
    dag = bag.dags["outbox_relay_databricks"]
    (task,) = dag.tasks
    job = _drain_job()
    tasks = {t["task_key"]: t for t in job["tasks"]}
    files = {key: t["spark_python_task"]["python_file"] for key, t in tasks.items()}

    assert isinstance(task, DatabricksRunNowOperator)
    assert task.job_name == job["name"]
    # The job's run is the unit Airflow triggers: migrate, then the available-now drain.
    (drain_key,) = [k for k, f in files.items() if f.endswith("jobs/relay.py")]
    (migrate_key,) = [k for k, f in files.items() if f.endswith("jobs/migrate.py")]
    assert "--available-now" in tasks[drain_key]["spark_python_task"]["parameters"]
    assert [d["task_key"] for d in tasks[drain_key]["depends_on"]] == [migrate_key]
