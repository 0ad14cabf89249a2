-- The message check in one place: the payload's size (relay_message_size) and the cheap
-- conditions under which relay_message_problem can find anything at all
-- (relay_message_may_fail) are defined here once, and the claim (outbox_relay.control.claims)
-- calls both instead of writing them out again. Both are plain SQL expressions declared
-- IMMUTABLE, so the planner inlines them: the claim's plan and cost stay what they were.
-- Python's twin is outbox_relay/rules/record_size.py (payload_size) and outbox_relay/rules/headers.py;
-- tests/integration/test_rules_contract.py pins each to its twin.

-- The relay's measure of a row: message + key + user headers as JSON text, NULL as 0.
CREATE OR REPLACE FUNCTION relay_message_size(p_message bytea, p_key bytea, p_headers jsonb)
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(octet_length(p_message), 0) + coalesce(octet_length(p_key), 0)
           + coalesce(octet_length(p_headers::text), 0)
$$;

-- False only where relay_message_problem (either form) returns NULL for certain: the row
-- fits, has no headers, needs no key, and its topic has nothing parked. The claim asks
-- relay_message_problem only where this holds, because its probe of the parked table per
-- row was most of a large claim's time. Keep it in step with relay_message_problem below.
CREATE OR REPLACE FUNCTION relay_message_may_fail(
    p_size integer, p_max_bytes bigint, p_headers jsonb, p_key bytea,
    p_key_required boolean, p_topic_has_parked boolean
) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_size > p_max_bytes OR p_headers IS NOT NULL OR p_topic_has_parked
           OR (p_key_required AND p_key IS NULL)
$$;

-- As in 0009, with the size from relay_message_size. The nine-argument form (0008)
-- delegates here and needs no change.
CREATE OR REPLACE FUNCTION relay_message_problem(
    p_id bigint, p_topic varchar, p_message bytea, p_key bytea, p_partition_key varchar,
    p_headers jsonb, p_max_bytes bigint, p_prefix text
) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN relay_message_size(p_message, p_key, p_headers) > p_max_bytes
          THEN format('message is %s bytes, over the limit of %s',
                      relay_message_size(p_message, p_key, p_headers), p_max_bytes)
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
