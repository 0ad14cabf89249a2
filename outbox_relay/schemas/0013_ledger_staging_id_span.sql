-- `ledger show --id` without a topic: which staged records hold an id. A GIN index over
-- ids would answer exactly, but it adds one index entry per message to the transaction
-- that deletes a round's rows (finish.FINISH_SESSIONS), the relay's latency path. One
-- entry per staged record is enough: a record's ids come from one claim window of one
-- topic, so the span [min, max] of its ids covers a given id in few records (about one
-- per topic whose window was open then), and `= ANY(ids)` checks those few exactly.
CREATE OR REPLACE FUNCTION relay_id_span(ids bigint[])
RETURNS int8range LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT int8range(min(x), max(x), '[]') FROM unnest(ids) AS x
$$;

CREATE INDEX IF NOT EXISTS relay_ledger_staging_id_span
    ON relay_ledger_staging USING gist (relay_id_span(ids));
