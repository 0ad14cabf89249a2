-- Each claimed row comes with its topic's partition count, as the relays last stored it
-- (kafka_topic_info.partition_count, noted from Kafka before every claim). The record
-- plan then computes explicit partitions from a column instead of holding every topic's
-- count as literals: with 1,000 topics, analysing that literal map took about 2.5 s of
-- every session's first batch, and a topic new to the session rebuilt the plan
-- (bench/, W3). Added last, so a relay that selects the older columns reads on.
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
           AS key_hash,
       i.partition_count
FROM relay_sessions s
JOIN kafka_messages m ON m.id = ANY (s.ids)
LEFT JOIN kafka_topic_info i ON i.topic = s.topic
WHERE NOT (m.id = ANY (s.compacted_ids));

-- Its `c.*` was expanded when it was created: re-created, it shows the new column.
CREATE OR REPLACE VIEW relay_current_batch_messages AS
SELECT c.*
FROM relay_claimed_messages c
WHERE c.batch_id = (SELECT max(s.batch_id) FROM relay_sessions s
                    WHERE s.lock_token = current_setting('relay.lock_token', true));
