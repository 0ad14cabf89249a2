"""Which Airflow and Spark provider this venv holds: tests/integration/test_airflow_dags.py
runs the tier once per venv and names the versions that venv's requirements pin in
OUTBOX_RELAY_AIRFLOW and OUTBOX_RELAY_SPARK_PROVIDER, so a venv built with other versions
fails here instead of passing for the wrong ones."""

from __future__ import annotations

import os
from importlib.metadata import version

import pytest


@pytest.mark.parametrize(("package", "variable"), [
    ("apache-airflow", "OUTBOX_RELAY_AIRFLOW"),
    ("apache-airflow-providers-apache-spark", "OUTBOX_RELAY_SPARK_PROVIDER"),
])
def test_the_venv_holds_the_version_it_was_built_for(package: str, variable: str) -> None:
    expected = os.environ.get(variable)
    if not expected:
        pytest.skip("run outside tests/integration/test_airflow_dags.py: no version named")
    assert version(package) == expected
