-- The writing transaction's id, for claims that keep a cursor behind the commit horizon.
-- Column first, default second: adding a volatile default together with the column would
-- rewrite the live table under an exclusive lock. Existing rows keep NULL.
ALTER TABLE kafka_messages ADD COLUMN IF NOT EXISTS xact_id xid8;
ALTER TABLE kafka_messages ALTER COLUMN xact_id SET DEFAULT pg_current_xact_id();
