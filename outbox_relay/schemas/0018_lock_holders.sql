-- Live lock holders (issue 52): a topic lock whose holder is certainly gone is taken over
-- at once, not after the lock timeout. Each relay process registers its lock tokens (its
-- own and its drain lanes') here under one holder key, and holds the advisory lock
-- (relay_holder_lock_class(), key) on a connection of its own for its whole life
-- (outbox_relay/control/liveness.py). The server releases that lock when the backend ends: a
-- killed process's sockets close and its backends exit at once. A stopped or paused
-- process keeps its connection open, and so its key. Deimos's tables are unchanged; a
-- token that is not registered here (a Deimos producer, an older relay) keeps the
-- timeout rule.
CREATE TABLE IF NOT EXISTS relay_lock_holders (
    lock_token    varchar     PRIMARY KEY,
    holder_key    integer     NOT NULL CHECK (holder_key > 0),
    -- The start of the server the key was taken on, set again at each (re)connection:
    -- a registration made before a restart, or on the primary before a failover, proves
    -- nothing on this server (relay_gone_lock_tokens).
    server_started timestamptz NOT NULL DEFAULT pg_postmaster_start_time(),
    registered_at timestamptz NOT NULL DEFAULT now()
);

CREATE SEQUENCE IF NOT EXISTS relay_holder_key_seq AS integer MINVALUE 1 CYCLE;

-- The first half of every holder lock's two-part key: the two-integer advisory locks are
-- a key space of their own, apart from the one-bigint locks of the migrations, the
-- ledger copy and most applications.
CREATE OR REPLACE FUNCTION relay_holder_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1380273241 $$;

-- The one definition of "the holder of this token is certainly gone": the token is
-- registered on this very server run, and no backend of this database holds its key. A
-- restart or a failover ends every backend, live holders' too; registrations from before
-- it prove nothing until their holders reconnect (the timeout applies meanwhile). Read
-- once per statement: `token IN (SELECT relay_gone_lock_tokens())`.
CREATE OR REPLACE FUNCTION relay_gone_lock_tokens() RETURNS SETOF varchar
LANGUAGE sql STABLE AS $$
    SELECT h.lock_token
    FROM relay_lock_holders h
    WHERE h.server_started = pg_postmaster_start_time()
      AND NOT EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = relay_holder_lock_class()::oid
          AND l.objid = h.holder_key::oid
      )
$$;
