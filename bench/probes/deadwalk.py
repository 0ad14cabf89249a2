"""Does the peer's `ORDER BY id LIMIT 1000` walk the rows it deleted before?

``python -m bench.probes.deadwalk URL [--index-only] [--hold] [--set-delete]``: a table shaped like
kafka_messages (300,000 rows of 1 KB over 10 topics, index (topic, id)), then 30 rounds
of the peer's select on one topic followed by its deletes in groups of 10, autocommit;
every third round prints the select's EXPLAIN (ANALYZE, BUFFERS) and how many entries of
the (topic, id) index are marked dead (pageinspect's ``bt_page_items``).

The peer's select fetches the payload, so it is a plain index scan. ``--index-only``
selects only ``id``, an index-only scan of the same index. On PostgreSQL 18.6 (data
checksums on) the index-only scan marks the deleted rows' entries dead as it passes
them, and the plain scan never does: its buffers grow by about 1,450 a round, the heap
pages of every row deleted before. With ``--hold`` another session holds an xid open
throughout, which stops both from marking. ``--set-delete`` deletes each round's ids in one
statement, as the relay's finish does, instead of the peer's groups of 10.
"""

from __future__ import annotations

import argparse
import re

import psycopg2

SETUP = (
    "DROP TABLE IF EXISTS bench_deadwalk",
    "CREATE TABLE bench_deadwalk (id bigserial PRIMARY KEY, topic varchar NOT NULL, "
    "message bytea, key bytea, partition_key varchar)",
    "CREATE INDEX bench_deadwalk_topic_id ON bench_deadwalk (topic, id)",
    "INSERT INTO bench_deadwalk (topic, message, key) "
    "SELECT 't' || (i % 10), repeat('x', 1000)::bytea, ('k' || i)::bytea "
    "FROM generate_series(1, 300000) i",
    "CREATE EXTENSION IF NOT EXISTS pageinspect",
)
PEER_SELECT = ("SELECT id, topic, message, key, partition_key FROM bench_deadwalk "
               "WHERE topic = %s ORDER BY id LIMIT 1000")
IDS_SELECT = "SELECT id FROM bench_deadwalk WHERE topic = %s ORDER BY id LIMIT 1000"
DELETE = "DELETE FROM bench_deadwalk WHERE topic = %s AND id IN %s"
SET_DELETE = "DELETE FROM bench_deadwalk WHERE topic = %s AND id = ANY(%s)"
# Leaf and inner pages alike: block 0 is the metapage.
DEAD_ENTRIES = """
SELECT count(*) FILTER (WHERE dead)
FROM generate_series(1, (pg_relation_size('bench_deadwalk_topic_id') / 8192)::int - 1) b,
     LATERAL bt_page_items('bench_deadwalk_topic_id', b)
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.deadwalk")
    p.add_argument("url")
    p.add_argument("--hold", action="store_true", help="hold an xid open in another session")
    p.add_argument("--index-only", action="store_true",
                   help="select only id (an index-only scan) instead of the peer's columns")
    p.add_argument("--set-delete", action="store_true",
                   help="delete each round's ids in one statement, as the relay does")
    args = p.parse_args(argv)
    select = IDS_SELECT if args.index_only else PEER_SELECT
    conn = psycopg2.connect(args.url)
    conn.autocommit = True
    holder = None
    with conn.cursor() as cur:
        for statement in SETUP:
            cur.execute(statement)
        cur.execute("VACUUM ANALYZE bench_deadwalk")
        if args.hold:
            holder = psycopg2.connect(args.url)
            holder.cursor().execute("SELECT pg_current_xact_id()")
        for n in range(30):
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + select, ("t0",))
            plan = "\n".join(r[0] for r in cur.fetchall())
            if n % 3 == 0:
                ms = re.search(r"Execution Time: ([\d.]+)", plan)
                buffers = re.search(r"Buffers: (.*)", plan)
                scan = re.search(r"(Index Only Scan|Index Scan|Seq Scan|Bitmap)", plan)
                cur.execute(DEAD_ENTRIES)
                dead = cur.fetchone()
                print(f"round {n:2d}: {scan.group(1) if scan else '?'}, "
                      f"{ms.group(1) if ms else '?'} ms, "
                      f"{buffers.group(1) if buffers else '?'}, "
                      f"dead index entries {dead[0] if dead else '?'}", flush=True)
            cur.execute(select, ("t0",))
            ids = [r[0] for r in cur.fetchall()]
            if args.set_delete:
                cur.execute(SET_DELETE, ("t0", ids))
                continue
            for i in range(0, len(ids), 10):
                cur.execute(DELETE, ("t0", tuple(ids[i:i + 10])))
        cur.execute("DROP TABLE bench_deadwalk")
    if holder is not None:
        holder.close()
    conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
