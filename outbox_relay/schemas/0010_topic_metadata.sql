-- The partition count a relay last saw for the topic. Partitions added while no relay
-- ran map keys to other partitions; the next relay notices by comparing with this.
ALTER TABLE kafka_topic_info ADD COLUMN IF NOT EXISTS partition_count integer;
-- Since when the broker has answered that the topic does not exist. It counts as missing
-- only after kafka.missing_topic_grace_s, measured on the database clock that every
-- relay sharing the outbox also reads.
ALTER TABLE kafka_topic_info ADD COLUMN IF NOT EXISTS missing_since timestamp;
