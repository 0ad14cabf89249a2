-- The ledger records what operators did and where each published record went.
-- - Two outcomes of operators: `skipped` (removed from the outbox unsent, `outbox-relay
--   skip`) and `dropped` (a parked message deleted, `parked drop`), each with its actor.
-- - For published records, the partitioning bytes of each id (parallel to `ids`, NULL
--   where the row had neither key nor partition_key), the topic's partition count and
--   the partitioner of that send: enough for the Delta copy to compute the partition
--   after the rows are gone. Records of relays older than this migration hold NULL there.
-- Every column is nullable and new, so relays not yet upgraded keep staging records.
ALTER TABLE relay_ledger_staging DROP CONSTRAINT IF EXISTS relay_ledger_staging_outcome_check;
ALTER TABLE relay_ledger_staging ADD CONSTRAINT relay_ledger_staging_outcome_check
    CHECK (outcome IN ('published', 'parked', 'compacted', 'skipped', 'dropped'));

ALTER TABLE relay_ledger_staging ADD COLUMN IF NOT EXISTS actor varchar;
ALTER TABLE relay_ledger_staging ADD COLUMN IF NOT EXISTS partitioning_keys bytea[];
ALTER TABLE relay_ledger_staging ADD COLUMN IF NOT EXISTS topic_partitions integer;
ALTER TABLE relay_ledger_staging ADD COLUMN IF NOT EXISTS partitioner varchar;

-- An operator's outcome always names who; the keys stay parallel to the ids.
ALTER TABLE relay_ledger_staging ADD CONSTRAINT relay_ledger_staging_actor_check
    CHECK (outcome NOT IN ('skipped', 'dropped') OR actor IS NOT NULL);
ALTER TABLE relay_ledger_staging ADD CONSTRAINT relay_ledger_staging_keys_check
    CHECK (partitioning_keys IS NULL OR cardinality(partitioning_keys) = cardinality(ids));
ALTER TABLE relay_ledger_staging ADD CONSTRAINT relay_ledger_staging_partitioner_check
    CHECK (partitioner IN ('murmur2', 'crc32'));
