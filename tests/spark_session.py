"""The one SparkSession of a test run (pytest plugin, loaded from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from outbox_relay.config.load import build_config
from outbox_relay.launch.spark import build_session


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    warehouse = tmp_path_factory.mktemp("warehouse")
    config = build_config(
        {
            "spark": {
                "master": "local[2]",
                "app_name": "outbox-relay-tests",
                "shuffle_partitions": 2,
                "conf": {
                    "spark.sql.warehouse.dir": str(warehouse),
                    "spark.driver.memory": "1g",
                    "spark.sql.streaming.pollingDelay": "20ms",
                },
            }
        },
        env={},
    )
    session = build_session(config)
    yield session
    session.stop()
