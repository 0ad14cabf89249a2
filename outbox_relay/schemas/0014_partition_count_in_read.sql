-- Each row the executors read comes with its topic's partition count, as the relays last
-- stored it (kafka_topic_info.partition_count, noted from Kafka before every claim). The
-- record plan then computes explicit partitions from a column instead of holding every
-- topic's count as literals: with 1,000 topics, analysing that literal map took about
-- 2.5 s of every session's first batch, and a topic new to the session rebuilt the plan
-- (bench/, W3). Only the executors' view changes (relay_claimed_messages stays as 0011
-- made it); the column comes last, so a relay that selects the older ones reads on.
CREATE OR REPLACE VIEW relay_current_batch_messages AS
SELECT c.*, i.partition_count
FROM relay_claimed_messages c
LEFT JOIN kafka_topic_info i ON i.topic = c.topic
WHERE c.batch_id = (SELECT max(s.batch_id) FROM relay_sessions s
                    WHERE s.lock_token = current_setting('relay.lock_token', true));
