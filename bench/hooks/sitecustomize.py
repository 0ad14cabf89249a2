"""Loaded by the relay's processes when the bench puts this directory on PYTHONPATH.

With BENCH_PROPOSALS=1 it applies bench.proposals right after the module they replace
is imported, in the driver of a relay started by spark-submit. Bench only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

_TARGET = "relay.control.claims"


class _PatchAfterLoad(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            from bench.proposals import apply

            apply()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("BENCH_PROPOSALS") == "1":
    sys.meta_path.insert(0, _PatchAfterLoad())
