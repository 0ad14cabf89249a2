"""A relay paused inside its delete's transaction (a stopped VM, a long GC pause) on the
real database: it holds its topics' rows (HOLD_OWNED) until the server ends that idle
transaction. A rival skips those rows and goes on with its other topics at once, and the
server's idle-in-transaction timeout, below the lock timeout (config.checks), frees the
rows in time for the rival to take the lock over. The paused relay's delete then fails:
nothing it claimed is deleted (docs/design.md, invariant 3).

Clean-clone CI froze a relay there in fault scenario 13: its rival's lock statement waited
on the row, and the whole round with it, for the old 60 s idle timeout.
"""

from __future__ import annotations

import psycopg2
import pytest

from outbox_relay.config import Config
from outbox_relay.control.db import connect
from outbox_relay.control.liveness import Liveness
from outbox_relay.control.locks import HOLD_OWNED, RELEASE
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import query, unique, wait_for
from tests.integration.parties import Party

IDLE_IN_TRANSACTION = "SELECT state FROM pg_stat_activity WHERE pid = %s"


@pytest.fixture
def topics() -> list[str]:
    return [unique("paused"), unique("paused-other")]


@pytest.fixture
def config(make_config: ConfigFactory, topics: list[str]) -> Config:
    return make_config(topics, relay={"lock_timeout_s": 20, "heartbeat_interval_s": 2})


def test_a_rival_skips_a_paused_holders_topic_and_takes_it_once_the_server_ends_the_pause(
    migrated_url: str, config: Config, parties: tuple[Party, Party], topics: list[str],
) -> None:
    a, b = parties
    held, other = topics
    idle_s = config.postgres.idle_in_transaction_timeout_ms / 1000
    assert idle_s == config.relay.lock_timeout_s / 2, "unset, half the lock timeout"
    liveness = Liveness(config.postgres, [a.locks.token], probe_interval_s=3600)
    assert liveness.start()
    try:
        assert a.locks.acquire([held]) == [held]
        # a's delete transaction, as control/finish.py runs it, then a pause before commit.
        paused = connect(config.postgres, "test-paused-delete")
        with paused.cursor() as cur:
            cur.execute(HOLD_OWNED, a.locks.fence_params(topics=[held]))
            assert [r[0] for r in cur.fetchall()] == [held]
            cur.execute(RELEASE, ([held], a.locks.token))
        pid = paused.get_backend_pid()
        # Its liveness connection dropped too (scenario 13): its lock is takeable at once
        # by the rule, but its row is not free until its transaction ends.
        query(migrated_url, "SELECT pg_terminate_backend(%s)", (liveness.backend_pid,))
        assert wait_for(lambda: query(migrated_url, "SELECT count(*) FROM "
                                      "relay_gone_lock_tokens() t WHERE t = %s",
                                      (a.locks.token,))[0][0] == 1, 10, 0.05)

        assert b.locks.acquire([held, other]) == [other], "the paused row skipped"
        state = query(migrated_url, IDLE_IN_TRANSACTION, (pid,))
        assert state == [("idle in transaction",)], "b took its other topic without waiting"

        assert wait_for(lambda: not query(migrated_url, IDLE_IN_TRANSACTION, (pid,)),
                        idle_s + 15, 0.1), "the server ends the paused transaction"
        with pytest.raises(psycopg2.Error):
            paused.commit()  # the resumed relay's delete fails: fenced
        paused.close()
        assert b.locks.acquire([held]) == [held], "taken over once the row is free"
        owner = query(migrated_url, "SELECT locked_by FROM kafka_topic_info WHERE topic = %s",
                      (held,))
        assert owner == [(b.locks.token,)]
    finally:
        liveness.close()
