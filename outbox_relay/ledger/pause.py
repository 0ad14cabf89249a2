"""A stop's pause of Delta's auto compaction, shared by the relays of one SparkSession.

A stop turns auto compaction off for the copy in flight (outbox_relay.ledger.delta.Ledger.
end_copies). The setting is the session's runtime configuration, which outlives the
relay where a session is shared (a notebook, the tests) and is what Delta reads; on
Databricks a profile's value lives there only, never in the SparkContext's
configuration. So the value to give back is the session's own, read before the first
pause. Two relays of one session that stop together must not hand each other "false":
the first pause keeps the value, the others only count, and the last release restores it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from pyspark.sql import SparkSession

AUTO_COMPACT = "spark.databricks.delta.autoCompact.enabled"


@dataclass
class _Paused:
    spark: SparkSession  # held, so that its id is not another session's while paused
    before: str | None  # None: the session had no value of its own
    holders: int


_lock = threading.Lock()
_paused: dict[int, _Paused] = {}


def pause(spark: SparkSession) -> None:
    """Turns the session's auto compaction off until every pause of it is released."""
    with _lock:
        held = _paused.get(id(spark))
        if held is None:
            _paused[id(spark)] = _Paused(spark, spark.conf.get(AUTO_COMPACT, None), 1)
        else:
            held.holders += 1
        spark.conf.set(AUTO_COMPACT, "false")


def release(spark: SparkSession) -> None:
    """Ends one pause; the last gives the session back the value it had before the first."""
    with _lock:
        held = _paused.get(id(spark))
        if held is None:
            return
        held.holders -= 1
        if held.holders > 0:
            return
        del _paused[id(spark)]
        if held.before is None:
            spark.conf.unset(AUTO_COMPACT)
        else:
            spark.conf.set(AUTO_COMPACT, held.before)
