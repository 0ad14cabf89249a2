"""The default run's parts: the backlogs (backlog.py) and their drains (drain.py: W1, W1V,
W3, the scheduled drain), latency on a new topic (latency.py), and launch to the first
record (first.py)."""
