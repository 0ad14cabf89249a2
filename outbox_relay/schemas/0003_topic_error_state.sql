-- Why a topic is in error and when it may be tried again (capped exponential backoff).
ALTER TABLE kafka_topic_info ADD COLUMN IF NOT EXISTS last_error text;
ALTER TABLE kafka_topic_info ADD COLUMN IF NOT EXISTS next_retry_at timestamp;
-- Deimos rows created before a timestamp default existed still need one for our inserts.
ALTER TABLE kafka_messages ALTER COLUMN created_at SET DEFAULT (now() AT TIME ZONE 'UTC');
ALTER TABLE kafka_messages ALTER COLUMN updated_at SET DEFAULT (now() AT TIME ZONE 'UTC');
