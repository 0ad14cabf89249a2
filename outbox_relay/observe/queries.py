"""The named SQL behind `status`, the database-side metrics and the operator notebook.

Read-only, set-based statements: one per concern, never one query per topic. Every time
comes from the database's clock; `created_at` and the topic row's times are UTC
`timestamp without time zone` (Deimos's convention), so they are compared with
``now() AT TIME ZONE 'UTC'``. Lock liveness and backoff reuse outbox_relay.control.locks.
"""

from __future__ import annotations

from outbox_relay.control.locks import IN_BACKOFF, RETRY_AT, holder_gone, live_lock
from outbox_relay.control.pending import WAITING_TOPICS
from outbox_relay.rules.outcomes import Outcome

_NOW = "(now() AT TIME ZONE 'UTC')"

# Every topic with waiting rows (outbox_relay.control.pending's loose index scan), parked rows,
# or a kafka_topic_info row; its head and tail ids by one index probe each, its lock and
# error state, and its parked count. The head probe must run forwards, so while a
# transaction holds the horizon it steps over the index entries of the rows deleted
# before the oldest one left.
TOPICS = f"""
WITH RECURSIVE {WAITING_TOPICS},
parked AS (
    SELECT topic, count(*) AS parked FROM relay_parked_messages GROUP BY topic
),
topics AS (
    SELECT topic FROM waiting WHERE topic IS NOT NULL
    UNION SELECT topic FROM parked
    UNION SELECT topic FROM kafka_topic_info
)
SELECT t.topic,
       head.id AS oldest_id, head.created_at AS oldest_created_at,
       extract(epoch FROM {_NOW} - head.created_at)::float AS oldest_age_s,
       tail.id AS newest_id,
       coalesce(p.parked, 0)::bigint AS parked,
       i.locked_by, i.locked_at, coalesce(i.error, false) AS error,
       coalesce(i.retries, 0) AS retries, i.last_error, i.last_processed_at,
       coalesce({live_lock("i.locked_by")}, false) AS lock_alive,
       coalesce({holder_gone("i.locked_by")}, false) AS holder_gone,
       coalesce({IN_BACKOFF}, false) AS in_backoff,
       CASE WHEN i.error THEN {RETRY_AT} END AS retry_at,
       greatest(0, extract(epoch FROM {RETRY_AT} - {_NOW}))::float AS retry_in_s,
       extract(epoch FROM {_NOW} - greatest(i.last_processed_at, head.created_at))::float
           AS max_wait_s
FROM topics t
LEFT JOIN kafka_topic_info i ON i.topic = t.topic
LEFT JOIN parked p ON p.topic = t.topic
LEFT JOIN LATERAL (
    SELECT m.id, m.created_at FROM kafka_messages m WHERE m.topic = t.topic
    ORDER BY m.id LIMIT 1
) head ON true
LEFT JOIN LATERAL (
    SELECT m.id FROM kafka_messages m WHERE m.topic = t.topic ORDER BY m.id DESC LIMIT 1
) tail ON true
ORDER BY t.topic
"""

# The first `lim + 1` rows of each topic in id order, counted over the (topic, id) index:
# fewer than that is the exact backlog; otherwise `last_id`, the id of the last row
# counted, gives the topic's density for the estimate (outbox_relay.observe.backlog).
COUNT_HEADS = """
SELECT s.topic, c.n, c.last_id
FROM unnest(%(topics)s::varchar[], %(limits)s::bigint[]) AS s(topic, lim)
CROSS JOIN LATERAL (
    SELECT count(*) AS n, max(x.id) AS last_id
    FROM (SELECT m.id FROM kafka_messages m WHERE m.topic = s.topic
          ORDER BY m.id LIMIT s.lim + 1) x
) c
"""

# Without a visibility map the planner counted by a bitmap heap scan and a sort, which
# reads every row of the topic whatever the LIMIT; these keep it on the index, in order.
COUNT_PLAN = ("SET LOCAL enable_bitmapscan = off", "SET LOCAL enable_sort = off")

# Which ledger records a rate counts: the published ones, in every statement below
# (tests/unit/test_notebook_figures.py pins that all four statements carry it). The value
# is Outcome's, written into the text because delta-rs takes no parameters.
RATED_RECORDS = f"outcome = '{Outcome.PUBLISHED.value}'"

# The ledger's staged records per topic: messages published per window (parked, skipped
# and dropped ones were not delivered, and a parked message later dropped would count
# twice), and how far the copy to Delta lags behind them. `copy_batches` are the batches
# tagged for a copy and not yet removed: Delta may hold them already
# (outbox_relay.observe.ledger_rates).
STAGED = """
SELECT topic,
       count(*)::bigint AS records,
       coalesce(sum(cardinality(ids)), 0)::bigint AS messages,
       coalesce(sum(cardinality(ids)) FILTER (
           WHERE """ + RATED_RECORDS + """ AND relayed_at >= now() - interval '5 minutes'), 0
       )::bigint AS messages_5m,
       coalesce(sum(cardinality(ids)) FILTER (
           WHERE """ + RATED_RECORDS + """ AND relayed_at >= now() - interval '60 minutes'), 0
       )::bigint AS messages_60m,
       min(relayed_at) AS oldest_at,
       extract(epoch FROM now() - min(relayed_at))::float AS oldest_age_s,
       array_remove(array_agg(DISTINCT copy_batch), NULL) AS copy_batches
FROM relay_ledger_staging
GROUP BY topic
"""

# The database's clock, as the instant every age of one snapshot is measured from, and
# the cut-offs of the rate windows in microseconds since the epoch (for delta-rs).
CLOCK = """
SELECT now() AS now,
       (extract(epoch FROM now() - interval '5 minutes') * 1000000)::bigint AS since_5m_us,
       (extract(epoch FROM now() - interval '60 minutes') * 1000000)::bigint AS since_60m_us
"""

# What holds this database's horizon back (docs/design.md, invariant 5): the oldest of its
# backends' transaction ids and snapshots (and walsenders': hot_standby_feedback), its
# prepared transactions and the replication slots it or the cluster keeps. Autovacuum
# workers are left out: their snapshots hold no other vacuum back. The query text is
# never read: it may hold a secret.
HORIZON = """
WITH holders AS (
    SELECT 'backend' AS kind, a.pid, a.application_name AS name, a.state,
           a.xact_start AS since, greatest(age(a.backend_xid), age(a.backend_xmin)) AS xid_age,
           a.backend_xid IS NOT NULL AS wrote
    FROM pg_stat_activity a
    WHERE (a.datname = current_database() OR a.backend_type = 'walsender')
      AND a.pid <> pg_backend_pid()
      AND a.backend_type <> 'autovacuum worker'
      AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
    UNION ALL
    SELECT 'prepared', NULL, x.gid, 'prepared', x.prepared, age(x.transaction), true
    FROM pg_prepared_xacts x WHERE x.database = current_database()
    UNION ALL
    SELECT 'replication_slot', s.active_pid, s.slot_name,
           CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL,
           greatest(age(s.xmin), age(s.catalog_xmin)), false
    FROM pg_replication_slots s
    WHERE (s.database IS NULL OR s.database = current_database())
      AND (s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL)
)
SELECT kind, pid, name, state, since,
       extract(epoch FROM now() - since)::float AS age_s, xid_age, wrote
FROM holders
ORDER BY xid_age DESC NULLS LAST, since NULLS LAST
LIMIT 1
"""

# The queue table's own bookkeeping, as the statistics collector last saw it.
QUEUE_TABLE = """
SELECT n_live_tup AS live_tuples, n_dead_tup AS dead_tuples,
       last_autovacuum, last_vacuum, autovacuum_count
FROM pg_stat_user_tables WHERE relid = 'kafka_messages'::regclass
"""

# delta-rs takes SQL text and no parameters: the only values in it are the window's
# cut-offs, Python ints formatted with `:d` (anything else raises), never text from
# outside; `origin` is one of ORIGIN_COLUMNS. Grouped by origin and copy batch so that the
# caller keeps this outbox's rows and drops batches still staged (counted from staging).
DELTA_RATES = """
SELECT {origin} AS origin, topic, copy_batch,
       count(*) FILTER (WHERE relayed_at >= to_timestamp_micros({since_5m_us:d})) AS n5,
       count(*) AS n60
FROM ledger
WHERE relayed_at >= to_timestamp_micros({since_60m_us:d}) AND """ + RATED_RECORDS + """
GROUP BY {origin}, topic, copy_batch
"""
# A ledger written before rows carried their origin has no such column.
ORIGIN_COLUMNS = {True: "origin", False: "CAST(NULL AS VARCHAR)"}

# --- The operator notebook (outbox_relay.observe.throughput, outbox_relay.observe.health) ---

# The series' first minute, in minutes since the epoch on the database's clock: the
# current minute is the last of `minutes` buckets.
SERIES_CLOCK = """
SELECT now() AS now,
       floor(extract(epoch FROM now()) / 60)::bigint - %(minutes)s + 1 AS first_minute
"""


# Staged messages published per topic and minute.
STAGED_PER_MINUTE = f"""
SELECT topic, floor(extract(epoch FROM relayed_at) / 60)::bigint AS minute,
       sum(cardinality(ids))::bigint AS messages
FROM relay_ledger_staging
WHERE relayed_at >= to_timestamp(%(first_minute)s * 60) AND {RATED_RECORDS}
GROUP BY 1, 2
"""

# The same over Delta (see DELTA_RATES for how the text is built): to_unixtime is whole
# seconds since the epoch, so both sides bucket on the same minute boundaries.
DELTA_PER_MINUTE = """
SELECT {origin} AS origin, topic, copy_batch,
       CAST(to_unixtime(relayed_at) AS BIGINT) / 60 AS minute, count(*) AS messages
FROM ledger
WHERE relayed_at >= to_timestamp_micros({since_us:d}) AND """ + RATED_RECORDS + """
GROUP BY 1, 2, 3, 4
"""

# Parked messages by reason. Reasons carry ids and sizes ("message 812 is 20,061 bytes,
# over the limit of 10000"): digit runs become N so that one cause is one group.
PARKED_BY_REASON = """
SELECT regexp_replace(reason, '[0-9]+', 'N', 'g') AS reason,
       count(*)::bigint AS messages, count(DISTINCT topic)::bigint AS topics,
       min(reason) AS example, max(parked_at) AS last_parked_at
FROM relay_parked_messages
GROUP BY 1
ORDER BY messages DESC, reason
"""

# One message by id, outside the ledger (outbox_relay.ledger.lookup has it there): waiting or
# parked.
MESSAGE_WAITING = """
SELECT id, topic, created_at, octet_length(message) AS value_bytes,
       key IS NOT NULL AS has_key, partition_key IS NOT NULL AS has_partition_key
FROM kafka_messages WHERE id = %(id)s
"""
MESSAGE_PARKED = """
SELECT id, topic, created_at, reason, attempts, source, parked_at
FROM relay_parked_messages WHERE id = %(id)s
"""
