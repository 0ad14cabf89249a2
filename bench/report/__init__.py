"""The default run's report: its targets (targets.py) and its page (md.py)."""
