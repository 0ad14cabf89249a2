"""The default benchmark (`make bench`): the shipped profile under a user's conditions
(run.py, latency.py), its targets and report (report.py)."""
