-- A compacted topic (cleanup.policy=compact) refuses every record without a key, and
-- only the broker would say so, after later batches of the partition may already be in.
-- The relay reads the policy from Kafka and passes it here, so the refusal is caught
-- before sending like the others. The eight-argument form stays for relays not yet
-- upgraded, and holds every other check.
CREATE OR REPLACE FUNCTION relay_message_problem(
    p_id bigint, p_topic varchar, p_message bytea, p_key bytea, p_partition_key varchar,
    p_headers jsonb, p_max_bytes bigint, p_prefix text, p_key_required boolean
) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_key_required AND p_key IS NULL
          THEN 'message has no key, which a compacted topic (cleanup.policy=compact) refuses'
        ELSE relay_message_problem(p_id, p_topic, p_message, p_key, p_partition_key,
                                   p_headers, p_max_bytes, p_prefix)
    END
$$;
