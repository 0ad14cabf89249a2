"""The DAGs use no private name of Airflow or of a provider: such names change between
releases without notice (the Spark provider's `_get_hook`, `_process_spark_submit_log`
and `_submit_sp` did), and a DAG built on them breaks on an upgrade.

A private name is one with a single leading underscore. The DAG modules may keep their
own (`self._x` that they assign themselves); they may not read one of another object,
override one of a base class from elsewhere, or import one.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

from tests.airflow.conftest import DAGS


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own(tree: ast.AST) -> set[str]:
    """What the module gives `self` itself: attributes it assigns, methods it defines."""
    assigned = {node.attr for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id == "self"}
    methods = {node.name for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
               for node in cls.body if isinstance(node, ast.FunctionDef)}
    return assigned | methods


def _foreign_bases(module_name: str, class_name: str) -> list[type]:
    cls = getattr(importlib.import_module(module_name), class_name)
    ours = {p.stem for p in DAGS.glob("*.py")}
    return [base for base in inspect.getmro(cls)[1:] if base.__module__ not in ours]


def _private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _own(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(a.name for a in node.names)]
            found += [f"{where} import {n}" for n in names
                      if any(_private(part) for part in n.split("."))]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            is_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if not is_self or node.attr not in own:
                found.append(f"{where} {ast.unparse(node)}")
        elif isinstance(node, ast.ClassDef):
            methods = [n for n in node.body if isinstance(n, ast.FunctionDef) and _private(n.name)]
            for method in methods:
                for base in _foreign_bases(path.stem, node.name):
                    if method.name in vars(base):
                        found.append(f"{where} {node.name}.{method.name} overrides "
                                     f"{base.__module__}.{base.__qualname__}.{method.name}")
    return found


def test_the_dag_modules_use_no_private_name_of_airflow_or_a_provider() -> None:
    if str(DAGS) not in sys.path:
        sys.path.insert(0, str(DAGS))
    found = [use for path in sorted(DAGS.glob("*.py")) for use in _private_uses(path)]

    assert found == [], "\n".join(found)
