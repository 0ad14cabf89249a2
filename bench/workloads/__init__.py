"""The workloads the benchmark runs against every contender (suite.py names them as
``python -m bench run --only`` knows them), one module each, and what they share: the
steady load and its latency consumer (steady.py, latency.py)."""
