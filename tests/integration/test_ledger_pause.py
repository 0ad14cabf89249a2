"""A stop pauses Delta's auto compaction for the copy in flight; the session gets its own
value back only once that copy ended, even when the stop gave up waiting for it.

A real copy of staged records through Delta's Spark writer is held at the failpoint
before its write (outbox_relay.failpoints, `ledger_copy_held`) while the copier's stop runs its
waits (shortened here) and returns; the setting is the shared test SparkSession's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from outbox_relay import failpoints
from outbox_relay.control.db import Database
from outbox_relay.ledger import flusher
from outbox_relay.ledger.delta import Ledger
from outbox_relay.ledger.flusher import LedgerFlusher
from outbox_relay.ledger.pause import AUTO_COMPACT
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import query, wait_for
from tests.integration.test_ledger_writers import _records, _stage, _staged_count

pytestmark = pytest.mark.integration

TAGGED = "SELECT count(*) FROM relay_ledger_staging WHERE copy_batch IS NOT NULL"


def test_compaction_stays_paused_until_the_copy_the_stop_left_in_flight_ends(
    spark: SparkSession, migrated_url: str, make_config: ConfigFactory, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flusher, "_STOP_WAIT_S", 0.5)
    monkeypatch.setattr(flusher, "_CANCEL_WAIT_S", 0.5)
    held = tmp_path / "hold-copy"
    held.touch()
    monkeypatch.setenv(failpoints.ENV, "ledger_copy_held")
    monkeypatch.setenv(failpoints.HOLD_ENV, str(held))
    _stage(migrated_url, _records())
    config = make_config(ledger={"path": str(tmp_path / "ledger"), "writer": "spark"})
    db = Database(config.postgres, "test-ledger-pause")
    before = spark.conf.get(AUTO_COMPACT)
    copier = LedgerFlusher(Ledger(spark, config, db), interval_s=0.1, copy_early=True)
    try:
        copier.start()
        assert wait_for(lambda: query(migrated_url, TAGGED)[0][0] > 0, 60)

        copier.stop(copy_now=False)  # gives up on the held copy after its waits
        in_flight = copier._thread.is_alive()
        during = spark.conf.get(AUTO_COMPACT)
        held.unlink()  # the copy goes on with its write
        copier._thread.join(180)
        after = spark.conf.get(AUTO_COMPACT)
        print(f"before {before}; after the stop, copy in flight {in_flight}: {during}; "
              f"once it ended: {after}; staged {_staged_count(migrated_url)}")
        assert in_flight and not copier._thread.is_alive()
        assert during == "false", "compaction came back while the copy was in flight"
        assert after == before == "true"
        assert _staged_count(migrated_url) == 0
    finally:
        held.unlink(missing_ok=True)
        copier._thread.join(180)
        spark.conf.set(AUTO_COMPACT, before)
        db.close()
