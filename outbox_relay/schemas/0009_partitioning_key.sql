-- One definition of the key that orders messages: the partitioning bytes, partition_key
-- as UTF-8 when it is not NULL, else key. Kafka's partition comes from these bytes, so
-- rows whose bytes are equal are one key, whichever column the bytes came from. Before,
-- the read split, parking and compaction each had a rule of their own, and the split put
-- one key's rows into two Spark tasks that wrote to one Kafka partition at once.
--
-- The body must stay inlinable (only immutable functions inside): the view evaluates it
-- for every row read, and a non-inlined SQL function cost 8x the whole expression
-- (0.48 s against 0.06 s on 200,000 rows). convert_to is only stable, so a UTF8
-- database, where a text's bytes are already its UTF-8, decodes them through the escape
-- format (every backslash doubled, so nothing else is an escape); any other encoding
-- converts, correct but slower.
DO $$
BEGIN
    IF current_setting('server_encoding') = 'UTF8' THEN
        EXECUTE $f$
            CREATE OR REPLACE FUNCTION relay_partitioning_key(partition_key varchar, key bytea)
            RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $body$
                SELECT coalesce(decode(replace(partition_key, E'\\', E'\\\\'), 'escape'), key)
            $body$
        $f$;
    ELSE
        EXECUTE $f$
            CREATE OR REPLACE FUNCTION relay_partitioning_key(partition_key varchar, key bytea)
            RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $body$
                SELECT coalesce(convert_to(partition_key, 'UTF8'), key)
            $body$
        $f$;
    END IF;
END
$$;

-- The executors split the read on key_hash: equal partitioning bytes, equal hash, one
-- task. Rows with neither key nor partition_key order nothing and all hash to 0.
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
CROSS JOIN LATERAL unnest(s.ids) AS u(id)
JOIN kafka_messages m ON m.id = u.id
WHERE NOT (u.id = ANY (s.compacted_ids));

-- The index over the old tagged key goes before that function changes meaning: an
-- expression index over a function redefined in place would hold stale values.
DROP INDEX IF EXISTS relay_parked_messages_topic_key;
CREATE INDEX IF NOT EXISTS relay_parked_messages_topic_partitioning_key
    ON relay_parked_messages (topic, relay_partitioning_key(partition_key, key));

-- relay_ordering_key is kept, not dropped: a relay not yet upgraded still calls it in its
-- parking statement, and would fail there while the new one migrates under it. It is now
-- a thin wrapper (same signature and type) over the one definition, so the old relay
-- groups parked keys the new way too. Nothing in this version calls it; drop it once no
-- relay older than this migration runs.
CREATE OR REPLACE FUNCTION relay_ordering_key(partition_key varchar, key bytea)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(relay_partitioning_key(partition_key, key), 'hex')
$$;

-- As in 0007, with the parked-key check on the partitioning bytes. The nine-argument form
-- (0008) delegates here and needs no change.
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
        WHEN relay_partitioning_key(p_partition_key, p_key) IS NOT NULL AND EXISTS (
               SELECT 1 FROM relay_parked_messages p
               WHERE p.topic = p_topic AND p.id < p_id
                 AND relay_partitioning_key(p.partition_key, p.key)
                     = relay_partitioning_key(p_partition_key, p_key))
          THEN 'an earlier message of this key is parked'
    END
$$;
