"""The benchmark's layout: no circle of imports between its modules, and it measures the
product as committed (no run-time patch of outbox_relay/, no copy of the claim's SQL)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module_name(path: Path) -> str:
    parts = path.relative_to(BENCH.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in BENCH.rglob("*.py")}


def _imported(node: ast.AST, known: set[str]) -> set[str]:
    """The bench modules one import statement names (a function's own imports too: a
    circle through a lazy import is still a circle)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        # `from bench.report import md` names the module bench.report.md if it is one.
        names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
    found = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        deps: set[str] = set()
        for node in ast.walk(tree):
            deps |= _imported(node, known)
        # A package's own __init__ is imported on the way to any of its modules; an edge
        # to it is not a circle through the module.
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_sees_function_level_imports() -> None:
    assert "bench.report.md" in _graph().get("bench.__main__", set())


def test_bench_imports_have_no_circle() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_top_folder_holds_the_shared_core_only() -> None:
    top = sorted(p.name for p in BENCH.glob("*.py"))
    assert len(top) <= 12, top
    assert {p.name for p in BENCH.iterdir() if (p / "__init__.py").exists()} >= {
        "workloads", "probes", "report"}


def test_bench_does_not_patch_the_product() -> None:
    """A benchmark measures outbox_relay/ as committed: no hook in the relay's processes, no
    statement of a relay module replaced (a module constant such as claims.CLAIM), no
    copy of the claim's statement. (The profiler's timers wrap the relay's functions
    and leave what they do alone.)"""
    assert not list(BENCH.rglob("sitecustomize.py"))
    for name, tree in _modules().items():
        from_relay = {a.asname or a.name for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and (node.module or "")
                      .startswith("outbox_relay") for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    assert not (isinstance(target, ast.Attribute) and target.attr.isupper()
                                and isinstance(target.value, ast.Name)
                                and target.value.id in from_relay), (name, ast.unparse(target))
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert "relay_message_problem(" not in node.value, name
