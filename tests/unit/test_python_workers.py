"""The session keeps no Python worker daemons when it runs no Python UDF
(outbox_relay.launch.spark.WORKERS_WITHOUT_UDFS): their memory was a third of the relay's
at 500 msg/s, and only a UDF gains from them."""

from __future__ import annotations

from typing import Any

import pytest

from outbox_relay.config.load import build_config
from outbox_relay.launch.spark import WORKERS_WITHOUT_UDFS, base_conf

TRANSFORM = {"match": "tx-.*", "transform": "myapp.transforms:encrypt"}


def _conf(relay: dict[str, Any] | None = None, ledger: dict[str, Any] | None = None,
          spark: dict[str, str] | None = None) -> dict[str, str]:
    raw: dict[str, Any] = {"spark": {"resolve_packages": False, "conf": spark or {}}}
    if relay:
        raw["relay"] = relay
    if ledger:
        raw["ledger"] = ledger
    return base_conf(build_config(raw, env={}))


def _workers(conf: dict[str, str]) -> dict[str, str | None]:
    return {k: conf.get(k) for k in WORKERS_WITHOUT_UDFS}


def test_a_session_without_udfs_keeps_no_daemon_nor_idle_worker() -> None:
    assert _workers(_conf()) == WORKERS_WITHOUT_UDFS


@pytest.mark.parametrize("case", ["a transform", "the Spark writer", "a Volume", "storage"])
def test_a_session_that_runs_udfs_keeps_sparks_defaults(case: str) -> None:
    conf = {
        "a transform": lambda: _conf(relay={"topic_rules": [TRANSFORM]}),
        "the Spark writer": lambda: _conf(ledger={"writer": "spark"}),
        "a Volume": lambda: _conf(ledger={"path": "/Volumes/main/relay/ledger"}),
        "storage": lambda: _conf(ledger={"path": "s3://bucket/ledger"}),
    }[case]()
    assert _workers(conf) == dict.fromkeys(WORKERS_WITHOUT_UDFS)


def test_the_profiles_spark_conf_wins() -> None:
    conf = _conf(spark={"spark.python.use.daemon": "true"})
    assert conf["spark.python.use.daemon"] == "true"
