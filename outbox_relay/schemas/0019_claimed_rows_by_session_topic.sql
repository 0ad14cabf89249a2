-- A claimed row's topic is now its session's (the same value: a session claims one
-- topic), so a read of some of a batch's topics (the direct lane's writes, Spark's
-- bisection) selects their sessions first. With kafka_messages.topic the filter ran after
-- the join: a write of 50 of a batch's 1,000 topics looked up all 100,000 of its rows,
-- 110 ms for 5,000 rows, twenty times over (bench/, W3). Same columns as 0017.
CREATE OR REPLACE VIEW relay_claimed_messages AS
SELECT s.batch_id,
       m.id,
       s.topic,
       m.message,
       m.key,
       m.partition_key,
       m.created_at,
       m.headers::text AS headers,
       coalesce(hashtext(encode(relay_partitioning_key(m.partition_key, m.key), 'hex')), 0)
           AS key_hash
FROM relay_sessions s
JOIN kafka_messages m ON m.id = ANY (s.ids);
