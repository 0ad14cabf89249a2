"""Which Spark provider this venv holds: tests/integration/test_airflow_dags.py runs the
tier once per venv, each with the provider version its requirements pin, and names that
version in OUTBOX_RELAY_SPARK_PROVIDER, so a venv built with another version fails here
instead of passing for the wrong one."""

from __future__ import annotations

import os
from importlib.metadata import version

import pytest

SPARK_PROVIDER = "apache-airflow-providers-apache-spark"


def test_the_venv_holds_the_spark_provider_version_it_was_built_for() -> None:
    expected = os.environ.get("OUTBOX_RELAY_SPARK_PROVIDER")
    if not expected:
        pytest.skip("run outside tests/integration/test_airflow_dags.py: no version named")
    assert version(SPARK_PROVIDER) == expected
