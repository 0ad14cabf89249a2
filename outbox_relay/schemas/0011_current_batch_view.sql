-- The claimed rows by `id = ANY(ids)`: one index scan per session that walks the sorted
-- ids, instead of one index probe per unnested id. 100,000 rows in 10 sessions: 131 ms
-- instead of 298 ms per read task (EXPLAIN ANALYZE, bench/). Same columns and key_hash.
CREATE OR REPLACE VIEW relay_claimed_messages AS
SELECT s.batch_id,
       m.id,
       m.topic,
       m.message,
       m.key,
       m.partition_key,
       m.created_at,
       m.headers::text AS headers,
       coalesce(hashtext(encode(relay_partitioning_key(m.partition_key, m.key), 'hex')), 0)
           AS key_hash
FROM relay_sessions s
JOIN kafka_messages m ON m.id = ANY (s.ids)
WHERE NOT (m.id = ANY (s.compacted_ids));

-- What the executors read over JDBC: the rows of the latest batch claimed by the relay
-- whose lock token the reading connection names in its `relay.lock_token` setting (a
-- connection option, outbox_relay.data.read). No batch id is part of the read's Spark plan, so
-- the driver builds that plan once per session instead of once per batch: its analysis
-- cost more than the write of a 1,000-row batch (bench/, W2).
-- The latest batch is the one being sent: a relay finishes (or abandons) its sessions
-- before it claims again, and batch ids come from a sequence.
CREATE OR REPLACE VIEW relay_current_batch_messages AS
SELECT c.*
FROM relay_claimed_messages c
WHERE c.batch_id = (SELECT max(s.batch_id) FROM relay_sessions s
                    WHERE s.lock_token = current_setting('relay.lock_token', true));
