-- A session's compacted_ids are now the rows it withholds (outbox_relay/control/withheld.py):
-- never in its ids, so the executors' read needs no filter against them. 0011's filter
-- scans the whole array for every row read, which cost nothing while the array was
-- always empty: a session of 10,000 rows that withholds 5,000 read in 0.46 s with it,
-- 2 ms without (count and sum over the view, medians of 3). Same columns as 0011, so
-- relay_current_batch_messages (0014) is unchanged.
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
JOIN kafka_messages m ON m.id = ANY (s.ids);
