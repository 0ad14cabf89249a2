"""A round that holds a big backlog beside topics whose whole backlog fits in it: the
backlogged topics share `relay.shared_round_rows`, so the round the others wait for
stays short (bench W5), and every topic still leaves in id order.

The claims are read back from relay_sessions; the drain's records from a consumer.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import zip_longest

import pytest

from relay.config import Config
from relay.control.claims import Claims, TopicLimits
from relay.control.db import Database
from relay.control.locks import Backoff, TopicLocks
from relay.stack import StackInfo
from relay.stream.runner import EXIT_OK
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import (
    consume,
    create_topics,
    every_key_shape,
    insert,
    order_report,
    query,
    unique,
)

pytestmark = pytest.mark.integration

LIMIT = 10  # rows per topic per claim: a topic with this many or more is backlogged
SESSION_IDS = "SELECT ids FROM relay_sessions WHERE session_id = %s"


class Claimer:
    """One relay's locks and claims, without Spark."""

    def __init__(self, config: Config) -> None:
        self.db = Database(config.postgres, "test-shared-rounds")
        settings = config.relay
        self.locks = TopicLocks(self.db, "relay-shared", settings.lock_timeout_s,
                                Backoff(0.5, 2))
        self.claims = Claims(self.db, "relay-shared", settings.lock_timeout_s,
                             settings.header_prefix, settings.source_name)

    def claim(self, topics: list[str], shared_rows: int | None) -> dict[str, list[int]]:
        """The ids each topic's session took, in the order the session keeps them."""
        assert sorted(self.locks.acquire(topics)) == sorted(topics)
        batch = self.claims.claim([TopicLimits(t, 1_000_000, False) for t in topics],
                                  LIMIT, 10**9, shared_rows)
        assert not [c for c in batch.claims if c.bad_id is not None]
        took = {c.topic: list(self.db.one(SESSION_IDS, (c.session_id,))["ids"])
                for c in batch.sessions}
        # As if the round had failed: the rows stay, the next claim starts afresh.
        self.db.execute("DELETE FROM relay_sessions WHERE lock_token = %s", ("relay-shared",))
        self.locks.release(topics)
        return took


@pytest.fixture
def claimer(make_config: ConfigFactory) -> Iterator[Claimer]:
    c = Claimer(make_config([]))
    yield c
    c.db.close()


def _rows(url: str, topic: str, n: int) -> list[int]:
    """n rows of one topic, every key shape among them, one transaction each."""
    return insert(url, [[m] for m in every_key_shape([topic], n)])


def test_a_backlog_beside_small_topics_takes_the_shared_rows_from_its_head(
    migrated_url: str, claimer: Claimer
) -> None:
    big, small_a, small_b = unique("shared-big"), unique("shared-sa"), unique("shared-sb")
    big_ids = _rows(migrated_url, big, 30)
    small = {small_a: _rows(migrated_url, small_a, 3), small_b: _rows(migrated_url, small_b, 2)}

    took = claimer.claim([big, small_a, small_b], shared_rows=4)

    print("claimed:", {t: len(ids) for t, ids in took.items()})
    assert took[big] == big_ids[:4], "the backlog's share, from its head"
    assert {t: took[t] for t in small} == small, "the small topics whole"


def test_backlogged_topics_take_turns_and_each_keeps_its_head(
    migrated_url: str, claimer: Claimer
) -> None:
    first, second = sorted([unique("shared-b1"), unique("shared-b2")])
    small = unique("shared-s")
    ids = {first: _rows(migrated_url, first, 30), second: _rows(migrated_url, second, 30)}
    _rows(migrated_url, small, 2)

    took = claimer.claim([first, second, small], shared_rows=5)
    # Turns by row: first's 1st, second's 1st, first's 2nd, second's 2nd, first's 3rd.
    assert (took[first], took[second]) == (ids[first][:3], ids[second][:2])

    took = claimer.claim([first, second, small], shared_rows=1)
    assert (took[first], took[second]) == (ids[first][:1], ids[second][:1]), \
        "a budget below the backlogged topics' count still moves each of them"


def test_nothing_is_cut_without_a_topic_waiting_beside_the_backlog_or_without_a_budget(
    migrated_url: str, claimer: Claimer
) -> None:
    first, second, small = unique("shared-n1"), unique("shared-n2"), unique("shared-ns")
    ids = {first: _rows(migrated_url, first, 30), second: _rows(migrated_url, second, 30)}

    took = claimer.claim([first, second], shared_rows=3)
    assert (took[first], took[second]) == (ids[first][:LIMIT], ids[second][:LIMIT])

    _rows(migrated_url, small, 2)
    took = claimer.claim([first, second, small], shared_rows=None)
    assert (took[first], took[second]) == (ids[first][:LIMIT], ids[second][:LIMIT])


def test_a_drain_with_shared_rounds_delivers_every_key_shape_in_order(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
) -> None:
    sizes = {unique("shared-e2e-big"): 61, unique("shared-e2e-mid"): 23,
             unique("shared-e2e-s1"): 4, unique("shared-e2e-s2"): 7}
    create_topics(stack.kafka_bootstrap, {t: 3 for t in sizes})
    # Interleaved, one row a transaction: the topics' ids alternate.
    per_topic = [every_key_shape([t], n) for t, n in sizes.items()]
    msgs = [m for turn in zip_longest(*per_topic) for m in turn if m is not None]
    ids = insert(migrated_url, [[m] for m in msgs])
    config = make_config(list(sizes), relay={"batch_size": LIMIT, "shared_round_rows": 3})

    result = run_relay(config)

    assert result.exit_code == EXIT_OK
    got = consume(stack.kafka_bootstrap, list(sizes), expect=len(ids))
    assert sorted(r.outbox_id for r in got) == sorted(ids), "lost or duplicated"
    inversions, spread, _ = order_report(dict(zip(ids, msgs, strict=True)), got)
    assert (inversions, spread) == (0, 0)
    # Without the budget the big topic would leave in 7 rounds of 10 at most.
    assert result.stats.batches > 7
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages WHERE topic = ANY(%s)",
                 (list(sizes),))[0][0] == 0
