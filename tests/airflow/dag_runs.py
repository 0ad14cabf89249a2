"""Parse the project's DAGs and run one with `dag.test()`, in this process."""

from __future__ import annotations

from typing import Any

from airflow.models.dagbag import DagBag

from tests.airflow.conftest import DAGS


def load_dag(dag_id: str) -> Any:
    """A fresh parse of dags/: the DAG file reads its settings from the environment."""
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def run_dag(dag: Any, mark_success: str | None = None) -> Any:
    """`dag.test()`; tasks whose id fully matches `mark_success` are marked, not run."""
    return dag.test(mark_success_pattern=mark_success)


def task_states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
