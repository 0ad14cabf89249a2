-- Claim bookkeeping. A claim records the ids it took instead of stamping the payload
-- rows: rewriting 1 KB rows to set a session id costs more than reading them.
CREATE SEQUENCE IF NOT EXISTS relay_batch_seq;

CREATE TABLE IF NOT EXISTS relay_sessions (
    session_id    uuid        PRIMARY KEY,
    batch_id      bigint      NOT NULL,
    topic         varchar     NOT NULL,
    lock_token    varchar     NOT NULL,
    ids           bigint[]    NOT NULL,
    compacted_ids bigint[]    NOT NULL DEFAULT '{}',
    claimed_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS relay_sessions_batch ON relay_sessions (batch_id);
CREATE INDEX IF NOT EXISTS relay_sessions_topic ON relay_sessions (topic);

-- What the executors read over JDBC: the rows of the sessions of one micro-batch.
-- Spark pushes the batch_id filter down as a typed predicate.
CREATE OR REPLACE VIEW relay_claimed_messages AS
SELECT s.batch_id,
       m.id,
       m.topic,
       m.message,
       m.key,
       m.partition_key,
       m.created_at,
       m.headers::text AS headers,
       hashtext(coalesce(m.partition_key, encode(m.key, 'base64'), '')) AS key_hash
FROM relay_sessions s
CROSS JOIN LATERAL unnest(s.ids) AS u(id)
JOIN kafka_messages m ON m.id = u.id
WHERE NOT (u.id = ANY (s.compacted_ids));
