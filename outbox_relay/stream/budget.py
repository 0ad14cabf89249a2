"""An available-now drain's time budget: `relay.available_now_budget_s`, or `--time-budget-s`.

A runner's timeout (a Databricks task's `timeout_seconds`, Airflow's `execution_timeout`)
kills a drain that outlasts it in the middle of a write: what Kafka acknowledged is sent
again by the next run, and the topics' locks stay until `relay.lock_timeout_s`.
`relay.available_now_deadline_s` does not prevent that: it bounds only the wait for
topics in backoff or locked elsewhere, while ready topics keep draining. The budget ends
the drain first. Once it is spent the stop flag is set (StopSignal.run_out), so no lane
claims again and the rounds in flight finish their writes, deletes and releases, as on a
stop signal; but the run counts as a drain that ran out of time, not as an interrupted
one: it copies the ledger as every drain's end does and exits LEFT_OVER when rows from
before its start are left (outbox_relay.stream.runner).
"""

from __future__ import annotations

import argparse
import math
import threading
import time

from outbox_relay.stream.stop import StopSignal


def budget_seconds(text: str) -> float:
    """The argparse type of `--time-budget-s`: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def describe(seconds: float) -> str:
    """What the log and the run's summary say once the budget is spent."""
    return f"the time budget of {seconds:g} s ran out"


class TimeBudget:
    """Spends the budget `seconds` after `started` (time.monotonic()): the moment the
    relay's Python started, so that the session's start-up counts too. None: no budget."""

    def __init__(self, seconds: float | None, started: float, stop: StopSignal) -> None:
        self.seconds = seconds
        self._timer: threading.Timer | None = None
        if seconds is not None:
            left = max(0.0, started + seconds - time.monotonic())
            self._timer = threading.Timer(left, stop.run_out, args=(describe(seconds),))
            self._timer.name = "relay-time-budget"
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
