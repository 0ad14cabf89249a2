"""Rows a session withholds on a compacted topic (outbox_relay/control/withheld.py), on the real
database, through the control plane alone: which rows a claim withholds, which ones
isolation frees, and who deletes the rest as compacted, under which session.

The expected sets are written out by hand from the rule, over keys that differ only in
where their bytes come from: a record key under two partition_keys, two record keys
under one partition_key, a binary key that is not UTF-8, a NULL key.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from outbox_relay.config import Config
from outbox_relay.control.claims import Claim, TopicLimits
from outbox_relay.control.finish import finish
from outbox_relay.control.skipping import skip
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import Msg, insert, query, unique
from tests.integration.parties import Party

pytestmark = pytest.mark.integration

BINARY = b"\xff\xfe\x80"


@pytest.fixture
def config(make_config: ConfigFactory) -> Config:
    return make_config()


def _claim(party: Party, topic: str, max_bytes: int = 10**6) -> Claim:
    party.locks.acquire([topic])
    batch = party.claims.claim([TopicLimits(topic, max_bytes, True)], 100, 10**7)
    (session,) = batch.sessions
    return session


def _session(url: str, session_id: str | None) -> tuple[list[int], list[int]]:
    rows = query(url, "SELECT ids, compacted_ids FROM relay_sessions WHERE session_id = %s",
                 (session_id,))
    return (list(rows[0][0]), list(rows[0][1])) if rows else ([], [])


def _staged(url: str) -> list[tuple[Any, ...]]:
    return [(str(s), o, sorted(i)) for s, o, i in query(
        url, "SELECT session_id, outcome, ids FROM relay_ledger_staging ORDER BY seq")]


def _waiting(url: str) -> list[int]:
    return [i for (i,) in query(url, "SELECT id FROM kafka_messages ORDER BY id")]


def _expire(url: str, config: Config, topic: str) -> None:
    query(url, "UPDATE kafka_topic_info SET locked_at = locked_at - make_interval(secs => %s)"
               " WHERE topic = %s", (config.relay.lock_timeout_s + 1, topic))


def test_a_claim_withholds_what_a_later_row_of_the_same_key_and_bytes_supersedes(
    migrated_url: str, parties: tuple[Party, Party],
) -> None:
    topic = unique("withhold")
    rows = [
        Msg(topic, b"K", b"K:1"),                      # 0: superseded by 6 (bytes K)
        Msg(topic, b"K", b"KZ:1", partition_key="Z"),  # 1: superseded by 5 (bytes Z)
        Msg(topic, b"W", b"W:1", partition_key="K"),   # 2: bytes K, but record key W: by 7
        Msg(topic, None, b"N:1", partition_key="K"),   # 3: no record key: never superseded
        Msg(topic, BINARY, b"B:1"),                    # 4: superseded by 8
        Msg(topic, b"K", b"KZ:2", partition_key="Z"),  # 5
        Msg(topic, b"K", b"K:2", partition_key="K"),   # 6: same bytes as 0, from the other column
        Msg(topic, b"W", b"W:2", partition_key="K"),   # 7
        Msg(topic, BINARY, b"B:2"),                    # 8
        Msg(topic, None, b"N:2", partition_key="K"),   # 9
    ]
    ids = insert(migrated_url, [[m] for m in rows])
    a, _ = parties

    session = _claim(a, topic)

    sent, withheld = _session(migrated_url, session.session_id)
    print("sent", sent, "withheld", withheld)
    assert withheld == [ids[n] for n in (0, 1, 2, 4)]
    assert sent == [ids[n] for n in (3, 5, 6, 7, 8, 9)]
    assert (session.rows, session.withheld) == (6, 4)
    assert _waiting(migrated_url) == ids, "a claim deletes nothing"
    assert _staged(migrated_url) == [], "nor stages anything"


def test_one_claim_of_two_topics_withholds_only_on_the_compacted_one(
    migrated_url: str, parties: tuple[Party, Party],
) -> None:
    """The same keys, interleaved in one claim: only the compacted topic's rows are ever
    superseded, and by their own topic's rows."""
    compacted, plain = unique("withhold"), unique("plain")
    shapes = [(b"K", None), (b"K", "Z"), (BINARY, None), (None, "K")] * 2
    both = insert(migrated_url, [[Msg(t, key, b"%d" % n, partition_key=pkey)]
                                 for n, (key, pkey) in enumerate(shapes)
                                 for t in (compacted, plain)])
    ids = {compacted: both[0::2], plain: both[1::2]}
    a, _ = parties
    a.locks.acquire([compacted, plain])

    batch = a.claims.claim([TopicLimits(compacted, 10**6, True),
                            TopicLimits(plain, 10**6, False)], 100, 10**7)

    session = {s.topic: s.session_id for s in batch.sessions}
    assert _session(migrated_url, session[compacted]) == (
        [ids[compacted][n] for n in (3, 4, 5, 6, 7)], [ids[compacted][n] for n in (0, 1, 2)])
    assert _session(migrated_url, session[plain]) == (ids[plain], [])


def _isolation_rows(topic: str) -> list[Msg]:
    return [
        Msg(topic, b"K", b"K:1"),                      # 0: freed: only the culprit is later
        Msg(topic, b"K", b"K:2", partition_key="K"),   # 1: freed too
        Msg(topic, b"K", b"KZ:1", partition_key="Z"),  # 2: K's record key, bytes Z: kept
        Msg(topic, BINARY, b"B:1"),                    # 3: kept, B:2 may be in Kafka
        Msg(topic, b"K", b"KZ:2", partition_key="Z"),  # 4
        Msg(topic, b"K", b"K:3", partition_key="K"),   # 5: the culprit
        Msg(topic, BINARY, b"B:2"),                    # 6
        Msg(topic, None, b"keyless"),                  # 7
    ]


def _shared_rows(topic: str) -> list[Msg]:
    return [
        Msg(topic, b"K", b"K:1"),                      # 0: kept: W is later, may be in Kafka
        Msg(topic, b"K", b"K:2"),                      # 1: the culprit
        Msg(topic, b"W", b"W:1", partition_key="K"),   # 2: K's bytes, after the culprit
    ]


@pytest.mark.parametrize("shape", ["alone", "shared"])
def test_isolation_frees_a_withheld_row_only_when_nothing_but_the_culprit_follows_it(
    migrated_url: str, parties: tuple[Party, Party], shape: str,
) -> None:
    """What isolation found: the culprit refused for good, a prefix delivered. A freed
    row is an ordinary row again; every other withheld row is deleted as compacted when
    the session ends, under its id, whether or not a prefix was acknowledged."""
    topic = unique(f"free-{shape}")
    rows = _isolation_rows(topic) if shape == "alone" else _shared_rows(topic)
    culprit, freed, kept = ((5, {0, 1}, {2, 3}) if shape == "alone" else (1, set(), {0}))
    ids = insert(migrated_url, [[m] for m in rows])
    a, _ = parties
    session = _claim(a, topic)
    sent, _ = _session(migrated_url, session.session_id)
    delivered = [i for i in sent if i < ids[culprit]]

    n = a.claims.isolated(str(session.session_id), delivered, ids[culprit])

    _, withheld = _session(migrated_url, session.session_id)
    print(f"{shape}: freed {n}, still withheld {withheld}")
    assert n == len(freed) and withheld == sorted(ids[k] for k in kept)
    acknowledged = [replace(session, rows=len(delivered))] if delivered else []
    done = finish(a.claims, a.locks, [topic], acknowledged, {topic: "refused"})
    assert done.compacted == ({topic: len(kept)} if kept else {})
    compacted = [(session.session_id, "compacted", sorted(ids[k] for k in kept))]
    published = [(session.session_id, "published", delivered)]
    assert _staged(migrated_url) == (compacted if kept else []) + (
        published if delivered else [])
    assert _waiting(migrated_url) == [i for k, i in enumerate(ids)
                                      if k not in kept and i not in delivered]
    assert query(migrated_url, "SELECT count(*) FROM relay_sessions")[0][0] == 0


def test_a_lost_session_keeps_what_it_withholds_for_the_next_holder_to_settle(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
) -> None:
    """A relay whose lock lapsed cannot end its session; whatever its write appended,
    the next holder must never send the rows it withheld. Nobody drops them unsettled:
    not the lapsed relay's finish, not a claim under a lapsed lock, not the skip."""
    topic = unique("lost")
    rows = [Msg(topic, b"K", b"K:1"), Msg(topic, b"J", b"J:1"), Msg(topic, b"K", b"K:2")]
    ids = insert(migrated_url, [[m] for m in rows])
    a, b = parties
    session = _claim(a, topic)
    _expire(migrated_url, config, topic)

    done = finish(a.claims, a.locks, [topic], [session], {})
    assert done.lost == {topic}
    assert _session(migrated_url, session.session_id) == ([ids[1], ids[2]], [ids[0]])
    result = skip(a.db, [ids[0]], source="test", actor="tester",
                  lock_timeout_s=config.relay.lock_timeout_s)
    assert [bz.id for bz in result.busy] == [ids[0]], "withheld in a live session"
    query(migrated_url, "UPDATE relay_sessions SET claimed_at = now() - interval '1 hour'")
    # Stale now, but still withholding: a claim without the lock settles nothing, and its
    # clearing of stale sessions leaves this one.
    b.claims.claim([TopicLimits(topic, 10**6, True)], 100, 10**7)
    assert _session(migrated_url, session.session_id) == ([ids[1], ids[2]], [ids[0]])

    assert b.locks.acquire([topic]) == [topic]
    batch = b.claims.claim([TopicLimits(topic, 10**6, True)], 100, 10**7)

    print("the next holder's claim:", batch)
    assert batch.compacted == {topic: 1}
    assert _staged(migrated_url) == [(session.session_id, "compacted", [ids[0]])]
    assert [c.rows for c in batch.sessions] == [2] and _waiting(migrated_url) == ids[1:]
    left = [str(s) for (s,) in query(migrated_url, "SELECT session_id FROM relay_sessions")]
    assert left == [batch.sessions[0].session_id], "the settled stale session is cleared"


def test_parking_leaves_a_withheld_row_to_its_session(
    migrated_url: str, config: Config, parties: tuple[Party, Party],
) -> None:
    """A withheld row whose successor may be in Kafka is not parked, even when it could
    never be sent: a requeued copy would reach Kafka after the successor."""
    topic = unique("parkw")
    rows = [Msg(topic, b"K", b"K:1" * 100), Msg(topic, b"K", b"K:2")]
    ids = insert(migrated_url, [[m] for m in rows])
    a, b = parties
    _claim(a, topic)
    _expire(migrated_url, config, topic)
    finish(a.claims, a.locks, [topic], [], {})  # lost: the session keeps K:1 withheld
    b.locks.acquire([topic])

    parked = b.parking.park_doomed([TopicLimits(topic, 100, True)], 100)
    topic_parked = b.parking.park_topic(topic, "the topic is gone", 100)

    print("parked:", parked, topic_parked)
    assert [p.id for p in parked] == [] and [p.id for p in topic_parked] == [ids[1]]
    assert _waiting(migrated_url) == [ids[0]]
