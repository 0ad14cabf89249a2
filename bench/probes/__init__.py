"""What the benchmark measures with, beside the contenders: the machine's quietness and
CPU (quiet, cpu, outside), the driver's heap (heapprobe, hprof, histogram), the limits
(limits, javaperf, shape, floor), the in-process profile and EXPLAIN capture (profile,
profiles, explain, sqlexp), and the one-off probes run by hand (deadwalk,
ledger_lookup, status_speed)."""
