"""The benchmark's report: its figures and targets (figures.py, targets.py), its pages
(md.py and the sections it assembles) and plots (plots.py), written by files.py."""
