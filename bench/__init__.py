"""The benchmark of issue 4: the relay against a Deimos-faithful peer and the machine's limits.

Run it with ``python -m bench run [--quick]`` (or ``make bench``). Everything runs on a
local stack of its own; results go to ``reports/bench.json``, ``reports/bench.md`` and
PNG plots next to them. Nothing in here is used by the product.
"""
