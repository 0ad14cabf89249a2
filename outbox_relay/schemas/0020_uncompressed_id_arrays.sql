-- The id arrays a claim stores (relay_sessions) and a finish stages for the ledger
-- (relay_ledger_staging) are kept out of line without compression. Each is written once
-- and read once or twice, and a claim's is large (5,000 bigints for a direct write of
-- 1 KB rows): PostgreSQL compressed every one with pglz, which took 6-7% of its CPU while
-- one relay drained eight databases x 100,000 rows (perf, docs/performance.md, "The
-- id arrays' compression"). Only rows written from now on are stored so; a table's
-- storage setting changes nothing that is already there.
ALTER TABLE relay_sessions ALTER COLUMN ids SET STORAGE EXTERNAL;
ALTER TABLE relay_sessions ALTER COLUMN compacted_ids SET STORAGE EXTERNAL;
ALTER TABLE relay_ledger_staging ALTER COLUMN ids SET STORAGE EXTERNAL;
ALTER TABLE relay_ledger_staging ALTER COLUMN partitioning_keys SET STORAGE EXTERNAL;
