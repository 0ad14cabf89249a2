"""The relay process's cyclic garbage collector, tuned for its rounds.

A write of the direct lane makes some 25,000 container objects (each row's tuple from
psycopg2, its record, its header list and tuples), and the driver holds two writes of
every database it relays at once (outbox_relay.stream.direct_lane). At Python's default
threshold (a young collection every 700 net allocations) the collector ran dozens of
times a write, each time walking the records still held: on eight databases it took a
third of the interpreter's time, and that interpreter is what eight databases share
(docs/performance.md, "The collector"). The relay makes few reference cycles, so young
collections every GEN0_THRESHOLD allocations still free them, with little memory
waiting.
"""

from __future__ import annotations

import gc

# Net container allocations between young collections; the older generations keep
# Python's ratios (every 10 young, every 10 middle), so full ones stay as rare relative
# to the young ones as by default.
GEN0_THRESHOLD = 50_000
_OLDER = (10, 10)


def tune_collector() -> None:
    """Sets the thresholds for this process (the relay's own: app.main)."""
    gc.set_threshold(GEN0_THRESHOLD, *_OLDER)
