"""The benchmark of the relay against a Deimos-faithful peer (``make bench``,
docs/performance.md).

``python -m bench run`` is the default run (bench/run.py): the shipped profile under a
user's conditions, on the local stack of ``make demo``, reported into
reports/bench-default.{json,md}. Nothing in here is used by the product, and nothing in
here changes it: the relay is measured as committed.

Layout: the shared core at the top (the stack, the contenders and how they are
launched, the independent oracle, the relay's processes, the run); ``workloads/`` (the
backlogs, drains, latency and first-record runs); ``report/`` (targets and page);
``probes/`` (the quiet-machine gate, CPU counters, and probes run by hand). No module
imports itself back through others (tests/unit/test_bench_layout.py checks the graph).
"""
