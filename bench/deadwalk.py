"""Does the peer's `ORDER BY id LIMIT 1000` walk the rows it deleted before?

``python -m bench.deadwalk URL [--hold]``: a table shaped like kafka_messages (300,000
rows of 1 KB over 10 topics, index (topic, id)), then 30 rounds of the peer's select on
one topic followed by its deletes in groups of 10, autocommit; every third round prints
the select's EXPLAIN (ANALYZE, BUFFERS). With ``--hold`` another session holds an xid
open throughout. Growing buffers per round mean the deleted rows' index entries are not
being marked dead, so every select revisits their heap pages.
"""

from __future__ import annotations

import argparse
import re

import psycopg2

SETUP = """
DROP TABLE IF EXISTS bench_deadwalk;
CREATE TABLE bench_deadwalk (id bigserial PRIMARY KEY, topic varchar NOT NULL,
                             message bytea, key bytea, partition_key varchar);
CREATE INDEX bench_deadwalk_topic_id ON bench_deadwalk (topic, id);
INSERT INTO bench_deadwalk (topic, message, key)
SELECT 't' || (i % 10), repeat('x', 1000)::bytea, ('k' || i)::bytea
FROM generate_series(1, 300000) i;
"""
SELECT = ("SELECT id, topic, message, key, partition_key FROM bench_deadwalk "
          "WHERE topic = %s ORDER BY id LIMIT 1000")
DELETE = "DELETE FROM bench_deadwalk WHERE topic = %s AND id IN %s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.deadwalk")
    p.add_argument("url")
    p.add_argument("--hold", action="store_true", help="hold an xid open in another session")
    args = p.parse_args(argv)
    conn = psycopg2.connect(args.url)
    conn.autocommit = True
    holder = None
    with conn.cursor() as cur:
        cur.execute(SETUP)
        cur.execute("VACUUM ANALYZE bench_deadwalk")
        if args.hold:
            holder = psycopg2.connect(args.url)
            holder.cursor().execute("SELECT pg_current_xact_id()")
        for n in range(30):
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + SELECT, ("t0",))
            plan = "\n".join(r[0] for r in cur.fetchall())
            if n % 3 == 0:
                ms = re.search(r"Execution Time: ([\d.]+)", plan)
                buffers = re.search(r"Buffers: (.*)", plan)
                print(f"round {n:2d}: {ms.group(1) if ms else '?'} ms, "
                      f"{buffers.group(1) if buffers else '?'}", flush=True)
            cur.execute(SELECT, ("t0",))
            ids = [r[0] for r in cur.fetchall()]
            for i in range(0, len(ids), 10):
                cur.execute(DELETE, ("t0", tuple(ids[i:i + 10])))
        cur.execute("DROP TABLE bench_deadwalk")
    if holder is not None:
        holder.close()
    conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
