"""Prometheus's own binaries for the tests: promtool and the Pushgateway, from Debian's
packages, unpacked by `make prometheus-tools` (which `make test` runs first)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# RELAY_PROMETHEUS_BIN names another folder holding both, e.g. a system installation.
BIN = Path(os.environ.get("RELAY_PROMETHEUS_BIN")
           or REPO / ".relay-data" / "prometheus" / "usr" / "bin")


def tool(name: str) -> Path:
    """The binary, or a failure saying how to fetch it: `make test` fetches it, so a
    missing one is a broken set-up, never a reason to skip."""
    path = BIN / name
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{path} is missing: run `make prometheus-tools` (Debian's "
                             "prometheus and prometheus-pushgateway, unpacked locally)")
    return path
