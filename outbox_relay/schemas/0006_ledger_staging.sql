-- Session records written in the same transaction as the delete, then copied to the
-- Delta ledger off the latency path and removed once they are there.
CREATE TABLE IF NOT EXISTS relay_ledger_staging (
    seq        bigserial   PRIMARY KEY,
    session_id uuid        NOT NULL,
    topic      varchar     NOT NULL,
    outcome    varchar     NOT NULL CHECK (outcome IN ('published', 'parked', 'compacted')),
    ids        bigint[]    NOT NULL,
    source     varchar     NOT NULL,
    relayed_at timestamptz NOT NULL DEFAULT now()
);

-- A copy to Delta tags committed rows with a copy batch first, then writes that batch
-- with txnVersion = copy_batch. Ranges of seq would skip rows whose transaction
-- committed late; tags can't.
CREATE SEQUENCE IF NOT EXISTS relay_ledger_copy_seq;
ALTER TABLE relay_ledger_staging ADD COLUMN IF NOT EXISTS copy_batch bigint;
CREATE INDEX IF NOT EXISTS relay_ledger_staging_copy_batch ON relay_ledger_staging (copy_batch);
CREATE INDEX IF NOT EXISTS relay_ledger_staging_topic ON relay_ledger_staging (topic);
