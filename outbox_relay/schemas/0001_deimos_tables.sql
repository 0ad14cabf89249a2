-- The two tables of Deimos's database backend, column for column, so an outbox that
-- Deimos created (rows included) is taken over in place. Index names follow Rails'
-- conventions, so IF NOT EXISTS recognises the ones Deimos's migration made.
CREATE TABLE IF NOT EXISTS kafka_messages (
    id            bigserial PRIMARY KEY,
    topic         varchar   NOT NULL,
    message       bytea,
    key           bytea,
    partition_key varchar,
    created_at    timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    updated_at    timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
CREATE INDEX IF NOT EXISTS index_kafka_messages_on_topic_and_id ON kafka_messages (topic, id);

CREATE TABLE IF NOT EXISTS kafka_topic_info (
    id                bigserial PRIMARY KEY,
    topic             varchar   NOT NULL,
    locked_by         varchar,
    locked_at         timestamp,
    error             boolean   NOT NULL DEFAULT false,
    retries           integer   NOT NULL DEFAULT 0,
    last_processed_at timestamp
);
ALTER TABLE kafka_topic_info ADD COLUMN IF NOT EXISTS last_processed_at timestamp;
CREATE UNIQUE INDEX IF NOT EXISTS index_kafka_topic_info_on_topic ON kafka_topic_info (topic);
CREATE INDEX IF NOT EXISTS index_kafka_topic_info_on_locked_by_and_error
    ON kafka_topic_info (locked_by, error);
CREATE INDEX IF NOT EXISTS index_kafka_topic_info_on_locked_at ON kafka_topic_info (locked_at);
