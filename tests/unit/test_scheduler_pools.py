"""The session's own settings: the drain lane's rounds and the ledger's copies run in
scheduler pools of their own, behind the main rounds' writes, and the driver keeps a
bounded history of its jobs."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from outbox_relay.config.load import build_config
from outbox_relay.launch.spark import base_conf
from outbox_relay.ledger.delta import LEDGER_POOL
from outbox_relay.stream.lanes import DRAIN_POOL


def test_the_session_schedules_fairly_with_the_relays_pools() -> None:
    conf = base_conf(build_config({"spark": {"resolve_packages": False}}, env={}))
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools = {p.get("name"): p for p in ET.parse(conf["spark.scheduler.allocation.file"])
             .getroot().iter("pool")}
    assert set(pools) == {"default", DRAIN_POOL, LEDGER_POOL}
    # Needy first: the main rounds' pool always is, the drain lane's and the ledger's never.
    min_share = {name: int(p.findtext("minShare") or 0) for name, p in pools.items()}
    assert min_share[LEDGER_POOL] == min_share[DRAIN_POOL] == 0
    assert min_share["default"] >= 256


def test_the_pools_file_ships_in_the_wheel() -> None:
    import tomllib

    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "fairscheduler.xml" in data["tool"]["setuptools"]["package-data"]["outbox_relay"]


def test_the_status_store_keeps_a_bounded_history_unless_the_operator_says_otherwise() -> None:
    """A continuous relay would otherwise hold 1,000 jobs, stages and executions."""
    conf = base_conf(build_config({"spark": {"resolve_packages": False}}, env={}))
    for key in ("spark.ui.retainedJobs", "spark.ui.retainedStages",
                "spark.sql.ui.retainedExecutions"):
        assert int(conf[key]) <= 100, key
    assert int(conf["spark.ui.retainedTasks"]) <= 10_000
    mine = base_conf(build_config(
        {"spark": {"resolve_packages": False,
                   "conf": {"spark.sql.ui.retainedExecutions": "500"}}}, env={}))
    assert mine["spark.sql.ui.retainedExecutions"] == "500"
