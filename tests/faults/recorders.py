"""A fault scenario's database: created migrated, with test-only triggers that record
every change of a topic's owner and every claim, end of session and delete (the
recorders), and what they saw: owners, takeovers, fencing, unfinished claims."""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

import psycopg2

from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate
from tests.faults.infra import database_url, query, scalar, wait_until


def create_database(admin_url: str) -> str:
    """A new, migrated database on the server of `admin_url`; returns its URL."""
    name = f"f_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')  # a generated identifier
    finally:
        conn.close()
    url = database_url(admin_url, name)
    config = build_config({"postgres": {"url": url, "sslmode": "disable"}}, env={})
    db = Database(config.postgres)
    try:
        migrate(db)
    finally:
        db.close()
    install_recorders(url)
    return url


def drop_database(admin_url: str, url: str) -> None:
    name = url.rpartition("/")[2]
    with contextlib.suppress(psycopg2.Error):
        conn = psycopg2.connect(admin_url, connect_timeout=10)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            conn.close()


# Test-only instrumentation. lock_events: every change of a topic's owner, with the
# database's clock, the lock time the previous owner had last renewed, and whether that
# owner was certainly gone then (outbox_relay/schemas/0018, issue 52). fence_events:
# every claim, every end of a session and every delete from the outbox, with the topic's
# lock holder seen inside the very transaction that did it.
RECORDERS = """
CREATE TABLE IF NOT EXISTS fault_lock_events (
    seq bigserial PRIMARY KEY, topic varchar, old_owner varchar, new_owner varchar,
    old_locked_at timestamp, new_locked_at timestamp, old_gone boolean,
    at timestamp NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC')
);
CREATE TABLE IF NOT EXISTS fault_fence_events (
    seq bigserial PRIMARY KEY, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    kind varchar NOT NULL, topic varchar, token varchar, holder varchar, rows bigint,
    ids bigint[], session_id uuid,
    at timestamp NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC')
);
CREATE OR REPLACE FUNCTION fault_record_lock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.locked_by IS DISTINCT FROM OLD.locked_by THEN
        INSERT INTO fault_lock_events
            (topic, old_owner, new_owner, old_locked_at, new_locked_at, old_gone)
        VALUES (NEW.topic, OLD.locked_by, NEW.locked_by, OLD.locked_at, NEW.locked_at,
                OLD.locked_by IN (SELECT relay_gone_lock_tokens()));
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION fault_record_session() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
    INSERT INTO fault_fence_events (kind, topic, token, holder, rows, ids, session_id)
    VALUES (CASE WHEN TG_OP = 'INSERT' THEN 'claim' ELSE 'session_end' END, r.topic,
            r.lock_token,
            (SELECT locked_by FROM kafka_topic_info i WHERE i.topic = r.topic),
            cardinality(r.ids), CASE WHEN TG_OP = 'INSERT' THEN r.ids END, r.session_id);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION fault_record_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fault_fence_events (kind, topic, holder, rows)
    SELECT 'delete', g.topic, (SELECT locked_by FROM kafka_topic_info i WHERE i.topic = g.topic),
           count(*)
    FROM gone g GROUP BY g.topic;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS fault_lock_events ON kafka_topic_info;
CREATE TRIGGER fault_lock_events AFTER UPDATE ON kafka_topic_info
    FOR EACH ROW EXECUTE FUNCTION fault_record_lock();
DROP TRIGGER IF EXISTS fault_sessions ON relay_sessions;
CREATE TRIGGER fault_sessions AFTER INSERT OR DELETE ON relay_sessions
    FOR EACH ROW EXECUTE FUNCTION fault_record_session();
DROP TRIGGER IF EXISTS fault_deletes ON kafka_messages;
CREATE TRIGGER fault_deletes AFTER DELETE ON kafka_messages
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION fault_record_delete();
"""


def install_recorders(url: str) -> None:
    query(url, RECORDERS)


@dataclass(frozen=True)
class Ownership:
    """What the lock and fence recorders saw."""

    owners: set[str]
    takeovers: list[tuple[str, str, str, float]]  # topic, old, new, seconds since renewal
    # Taken while the old lock was fresh and its holder alive: never allowed.
    live_takeovers: list[tuple[str, str, str, float]]
    # Taken while the old lock was fresh, its holder certainly gone (issue 52).
    gone_takeovers: list[tuple[str, str, str, float]]
    unfenced: list[str]  # deletes by a process that did not hold the topic's lock
    stale_claims: list[str]  # claims made while another process held the lock


def ownership(url: str, lock_timeout_s: float) -> Ownership:
    """Check that a topic never had two owners at once, and that every claim and every
    delete of outbox rows was done by the process holding the topic's lock."""
    events = query(url, "SELECT topic, old_owner, new_owner, "
                   "extract(epoch FROM at - old_locked_at)::float, coalesce(old_gone, false) "
                   "FROM fault_lock_events ORDER BY seq")
    owners = {new for _, _, new, _, _ in events if new is not None}
    moves = [(t, old, new, age, gone) for t, old, new, age, gone in events
             if old is not None and new is not None and old != new]
    takeovers = [(t, old, new, age) for t, old, new, age, _ in moves]
    # A lock may pass straight to another process only once it has expired, or once its
    # holder is certainly gone.
    fresh = [x for x in moves if x[3] is None or x[3] < lock_timeout_s]
    live = [(t, old, new, age) for t, old, new, age, gone in fresh if not gone]
    gone = [(t, old, new, age) for t, old, new, age, gone in fresh if gone]
    # A claim by a process that no longer holds the lock is a send by the wrong owner:
    # every claim must check the token and an unexpired lock (issue 8, fencing), so the
    # scenarios assert there is none.
    stale_claims = [
        f"claim of {topic} by {token} while {holder} held it"
        for topic, token, holder in query(
            url, "SELECT topic, token, holder FROM fault_fence_events "
            "WHERE kind = 'claim' AND token IS DISTINCT FROM holder")
    ]
    # Every delete that ends a session: the session's token held the lock at that moment.
    unfenced = [
        f"delete of {rows} rows of {topic} in a transaction of {tokens} while {holder} held it"
        for topic, rows, holder, tokens in query(url, """
            SELECT d.topic, d.rows, d.holder, array_agg(DISTINCT s.token)
            FROM fault_fence_events d
            JOIN fault_fence_events s
              ON s.xid = d.xid AND s.topic = d.topic AND s.kind = 'session_end'
            WHERE d.kind = 'delete'
            GROUP BY d.seq, d.topic, d.rows, d.holder
            HAVING d.holder IS NULL OR NOT d.holder = ALL(array_agg(s.token))
        """)
    ]
    # Any other delete (parking): the lock was held by somebody relaying.
    unfenced += [
        f"delete of {rows} rows of {topic} without a lock holder"
        for topic, rows in query(url, """
            SELECT d.topic, d.rows FROM fault_fence_events d
            WHERE d.kind = 'delete' AND d.holder IS NULL
        """)
    ]
    return Ownership(owners, takeovers, live, gone, unfenced, stale_claims)


def unfinished_claims(url: str) -> set[int]:
    """Ids of every session that did not end by deleting its rows (killed, failed, fenced
    off): the only messages a relay may send twice.

    Such a session either ended in a transaction that deleted nothing of its topic, or
    left its rows to a later claim: an id claimed twice was not deleted by its first
    session. The transaction alone cannot tell the second case, since a finish drops its
    relay's unfinished sessions in the same transaction that deletes the rows it claimed
    again (a crash between a write and its finish, scenario 3).
    """
    rows = query(url, """
        SELECT c.ids FROM fault_fence_events c
        WHERE c.kind = 'claim' AND NOT EXISTS (
            SELECT 1 FROM fault_fence_events e
            JOIN fault_fence_events d ON d.xid = e.xid AND d.topic = e.topic AND d.kind = 'delete'
            WHERE e.kind = 'session_end' AND e.session_id = c.session_id)
        UNION ALL
        SELECT array_agg(id) FROM (
            SELECT id FROM fault_fence_events c, unnest(c.ids) AS id
            WHERE c.kind = 'claim' GROUP BY id HAVING count(*) > 1) again
    """)
    return {i for (ids,) in rows if ids for i in ids}


def quiesce(url: str, quiet_s: float = 2.0, timeout_s: float = 300) -> None:
    """Wait until no relay works on this outbox: no session, no lock, no lock change for
    `quiet_s`; topics waiting in backoff are put off for an hour first, so that no batch
    starts. A group SIGTERM that lands while Spark writes a checkpoint file kills Hadoop's
    `chmod` helper and fails the query (see test_signals.py); the scenarios here test
    their own fault, so they stop relays only when idle."""
    query(url, "UPDATE kafka_topic_info SET next_retry_at = now() AT TIME ZONE 'UTC' "
          "+ interval '1 hour' WHERE error")

    def idle() -> bool:
        return bool(scalar(url, """
            SELECT NOT EXISTS (SELECT 1 FROM relay_sessions)
               AND NOT EXISTS (SELECT 1 FROM kafka_topic_info WHERE locked_by IS NOT NULL)
               AND coalesce((SELECT max(at) FROM fault_lock_events), '-infinity')
                   < now() AT TIME ZONE 'UTC' - make_interval(secs => %s)
        """, (quiet_s,)))

    wait_until(idle, timeout_s, "the relays to be idle", interval_s=0.5)
