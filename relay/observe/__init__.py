"""What the relay tells its operators while it runs: metrics, log format, progress line."""
