"""What the benchmark measures with beside the contenders (quiet: the quiet-machine gate
and the settled machine; cpu: CPU counters), and the probes run by hand that
docs/performance.md quotes (deadwalk, ledger_lookup, status_speed)."""
