"""The benchmark of issue 4: the relay against a Deimos-faithful peer and the machine's limits.

Run it with ``python -m bench run [--quick]`` (or ``make bench``). Everything runs on a
local stack of its own; results go to ``reports/bench.json``, ``reports/bench.md`` and
PNG plots next to them. Nothing in here is used by the product, and nothing in here
changes it: the relay is measured as committed.

Layout: the shared core at the top (env, backlog, common, context, the relay's and the
peer's processes, repeat, plan); ``workloads/`` (one module per workload, suite.py names
them); ``probes/`` (what measures beside the contenders); ``report/`` (figures, targets,
pages, plots). No module imports itself back through others
(tests/unit/test_bench_layout.py checks the graph, imports inside functions too).
"""
