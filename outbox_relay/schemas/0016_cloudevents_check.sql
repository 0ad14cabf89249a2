-- CloudEvents on the wire (outbox_relay.rules.cloudevents): a topic whose rule sets
-- `cloudevents = true` gets the Kafka binding's attributes on each record. Two things
-- about such a row fail for certain, and are found by the claim before anything is sent
-- (so the topic's policy, block or park, applies as to every other message problem):
-- no ce_type header where the rule gives no default type, and a user header named like
-- an attribute the relay writes there (a consumer would see two values). The relay
-- passes two per-topic flags; the forms of 0008 and 0015 stay for relays not yet
-- upgraded. Python's twin is outbox_relay/rules/cloudevent_topics.py (message_problem);
-- tests/integration/test_cloudevents_contract.py pins the two together.

-- The CloudEvents problem of a row whose headers passed the shape checks (an object of
-- string values), or NULL.
CREATE OR REPLACE FUNCTION relay_cloudevents_problem(
    p_headers jsonb, p_cloudevents boolean, p_type_required boolean
) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN NOT p_cloudevents THEN NULL
        WHEN p_headers ? 'ce_specversion'
          THEN 'header ce_specversion is written by the relay on a CloudEvents topic'
        WHEN p_headers ? 'ce_id'
          THEN 'header ce_id is written by the relay on a CloudEvents topic'
        WHEN p_headers ? 'ce_source'
          THEN 'header ce_source is written by the relay on a CloudEvents topic'
        WHEN p_headers ? 'ce_time'
          THEN 'header ce_time is written by the relay on a CloudEvents topic'
        WHEN p_headers ->> 'ce_type' = ''
          THEN 'header ce_type is empty'
        WHEN p_type_required AND NOT coalesce(p_headers ? 'ce_type', false)
          THEN 'message has no ce_type header (publish it with event_type=) and its '
               'CloudEvents topic rule gives no event_type'
    END
$$;

-- The nine-argument form's checks first (0008, 0015), then the CloudEvents ones.
CREATE OR REPLACE FUNCTION relay_message_problem(
    p_id bigint, p_topic varchar, p_message bytea, p_key bytea, p_partition_key varchar,
    p_headers jsonb, p_max_bytes bigint, p_prefix text, p_key_required boolean,
    p_cloudevents boolean, p_type_required boolean
) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        relay_message_problem(p_id, p_topic, p_message, p_key, p_partition_key, p_headers,
                              p_max_bytes, p_prefix, p_key_required),
        relay_cloudevents_problem(p_headers, p_cloudevents, p_type_required))
$$;

-- As in 0015, and true for every row of a topic that requires a type: a row without
-- headers has none. (A row that writes an attribute of the relay's has headers.) Keep
-- it in step with relay_message_problem's eleven-argument form above.
CREATE OR REPLACE FUNCTION relay_message_may_fail(
    p_size integer, p_max_bytes bigint, p_headers jsonb, p_key bytea,
    p_key_required boolean, p_topic_has_parked boolean, p_type_required boolean
) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT relay_message_may_fail(p_size, p_max_bytes, p_headers, p_key, p_key_required,
                                  p_topic_has_parked)
           OR p_type_required
$$;
