"""The ledger's copies run in a scheduler pool of their own, behind the rounds' writes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from relay.config_load import build_config
from relay.ledger.delta import LEDGER_POOL
from relay.spark import base_conf


def test_the_session_schedules_fairly_with_the_relays_pools() -> None:
    conf = base_conf(build_config({"spark": {"resolve_packages": False}}, env={}))
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools = {p.get("name"): p for p in ET.parse(conf["spark.scheduler.allocation.file"])
             .getroot().iter("pool")}
    assert set(pools) == {"default", LEDGER_POOL}
    # Needy first: the rounds' pool always is, the ledger's never.
    min_share = {name: int(p.findtext("minShare") or 0) for name, p in pools.items()}
    assert min_share[LEDGER_POOL] == 0 and min_share["default"] >= 256


def test_the_pools_file_ships_in_the_wheel() -> None:
    import tomllib

    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "fairscheduler.xml" in data["tool"]["setuptools"]["package-data"]["relay"]
