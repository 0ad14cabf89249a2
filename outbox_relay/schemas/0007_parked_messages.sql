-- The dead-letter table of the `park` policy. A parked row keeps every byte of the
-- original, and leaves kafka_messages in the same transaction as it arrives here.
CREATE TABLE IF NOT EXISTS relay_parked_messages (
    id            bigint      PRIMARY KEY,
    topic         varchar     NOT NULL,
    message       bytea,
    key           bytea,
    partition_key varchar,
    headers       jsonb,
    created_at    timestamp   NOT NULL,
    reason        text        NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    source        varchar     NOT NULL,
    parked_at     timestamptz NOT NULL DEFAULT now()
);

-- The key that orders messages: partition_key, else key. Tagged, so a partition_key
-- can never equal the encoding of some binary key.
CREATE OR REPLACE FUNCTION relay_ordering_key(partition_key varchar, key bytea)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN partition_key IS NOT NULL THEN 'p:' || partition_key
        WHEN key IS NOT NULL THEN 'k:' || encode(key, 'base64')
    END
$$;

CREATE INDEX IF NOT EXISTS relay_parked_messages_topic_key
    ON relay_parked_messages (topic, relay_ordering_key(partition_key, key));

-- Why Kafka will refuse this message for certain, or NULL. Also refuses a message whose
-- key has an earlier message parked: sending it would overtake the parked one.
CREATE OR REPLACE FUNCTION relay_message_problem(
    p_id bigint, p_topic varchar, p_message bytea, p_key bytea, p_partition_key varchar,
    p_headers jsonb, p_max_bytes bigint, p_prefix text
) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN coalesce(octet_length(p_message), 0) + coalesce(octet_length(p_key), 0)
             + coalesce(octet_length(p_headers::text), 0) > p_max_bytes
          THEN format('message is %s bytes, over the limit of %s',
                      coalesce(octet_length(p_message), 0) + coalesce(octet_length(p_key), 0)
                      + coalesce(octet_length(p_headers::text), 0), p_max_bytes)
        WHEN p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object'
          THEN 'headers must be a JSON object'
        WHEN p_headers IS NOT NULL AND EXISTS (
               SELECT 1 FROM jsonb_each(p_headers) h WHERE left(h.key, length(p_prefix)) = p_prefix)
          THEN format('header name uses the reserved prefix %s', p_prefix)
        WHEN p_headers IS NOT NULL AND EXISTS (
               SELECT 1 FROM jsonb_each(p_headers) h WHERE jsonb_typeof(h.value) <> 'string')
          THEN 'header values must be strings'
        WHEN relay_ordering_key(p_partition_key, p_key) IS NOT NULL AND EXISTS (
               SELECT 1 FROM relay_parked_messages p
               WHERE p.topic = p_topic AND p.id < p_id
                 AND relay_ordering_key(p.partition_key, p.key)
                     = relay_ordering_key(p_partition_key, p_key))
          THEN 'an earlier message of this key is parked'
    END
$$;
