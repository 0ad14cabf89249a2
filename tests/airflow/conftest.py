"""The Airflow tier: runs in `.venv-airflow` only (`python -m pytest tests/airflow`).

The main test session never collects this folder (tests/conftest.py ignores it): its
venv has no Airflow, and Airflow's has no pyspark. tests/integration/test_airflow_dags.py
runs it in a subprocess, after seeding the outbox its drain tests read.

Airflow reads AIRFLOW_HOME when it is first imported, so the temporary home, its SQLite
database and the DAGs folder are set here, before any test module imports Airflow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"

_HOME = Path(tempfile.mkdtemp(prefix="airflow-home-"))
os.environ.update({
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
})
if str(DAGS) not in sys.path:
    sys.path.insert(0, str(DAGS))


@pytest.fixture(scope="session", autouse=True)
def airflow_db() -> Iterator[Path]:
    """`airflow db migrate` into the temporary home's SQLite database, once a session."""
    airflow = Path(sys.executable).parent / "airflow"
    done = subprocess.run([str(airflow), "db", "migrate"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    yield _HOME
    shutil.rmtree(_HOME, ignore_errors=True)
