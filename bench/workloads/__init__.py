"""The default run's parts: the backlogs (backlog.py) and their drains (drain.py: W1, W1V,
W3, the scheduled drain), latency on a new topic (latency.py), launch to the first
record (first.py), and a relay of many databases (many.py; latency.py for MANYSTOP and
MANYIDLE)."""
