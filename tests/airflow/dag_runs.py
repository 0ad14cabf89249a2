"""Parse the project's DAGs and run one with `dag.test()`, in this process."""

from __future__ import annotations

from typing import Any

from airflow.models.dagbag import DagBag
from airflow.sdk import DAG

from tests.airflow.conftest import DAGS

# Airflow 3.0's dag.test() runs the scheduler's DAG, whose failure handling finds no
# on_failure_callback on the SDK's operators ("Unable to unmap task to determine if we
# need to send an alert email", models/taskinstance.py, 3.0.0 to 3.0.6); its workers'
# task runner does call it. From 3.1, dag.test() runs the task runner too.
RUNS_FAILURE_CALLBACKS = hasattr(DAG, "test")


def load_dag(dag_id: str) -> Any:
    """A fresh parse of dags/: the DAG file reads its settings from the environment."""
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def run_dag(dag: Any, mark_success: str | None = None) -> Any:
    """`dag.test()`; tasks whose id fully matches `mark_success` are marked, not run."""
    if not RUNS_FAILURE_CALLBACKS:
        # Airflow 3.0's DagBag gives the SDK's DAG, whose test() came in 3.1; `airflow dags
        # test` runs the scheduler's DAG made from it, as this does.
        from airflow.models.dag import DAG as SchedulerDag

        dag = SchedulerDag.from_sdk_dag(dag)
    return dag.test(mark_success_pattern=mark_success)


def task_states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
