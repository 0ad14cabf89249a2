"""THE FLOOR PROBE (issue 10, W2): what one tiny batch costs Spark itself.

A bare Spark job reads 10 rows over JDBC and writes them through the Kafka sink, with
the relay's own JDBC and producer options (outbox_relay.data.read.jdbc_options,
outbox_relay.data.sink.producer_options), `runs` times in one session; no claim, no lock, no
ledger, no streaming trigger. W2's p50 is held against this probe's.

Run by the bench under spark-submit (the jars come from spark-defaults.conf):
``spark-submit bench/probes/floor.py --url URL --bootstrap HOST:PORT --topic T [--runs 100]
[--warmup 5]``;
it prints one JSON line, ``{"durations_s": [...]}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# The repo root instead of this script's folder, whose profile.py would shadow the
# standard library's (pyspark imports cProfile).
sys.path[0] = str(Path(__file__).resolve().parents[2])

from outbox_relay.config.load import build_config  # noqa: E402
from outbox_relay.data.read import jdbc_options  # noqa: E402
from outbox_relay.data.sink import producer_options  # noqa: E402

ROWS = 10
SEED = """
CREATE TABLE IF NOT EXISTS bench_floor_rows (id bigint PRIMARY KEY, key bytea, message bytea);
INSERT INTO bench_floor_rows SELECT g, ('k' || g)::bytea, repeat('x', 1000)::bytea
FROM generate_series(1, %s) g ON CONFLICT DO NOTHING;
"""
READ = "SELECT id, key, message FROM bench_floor_rows"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5, help="runs before the measured ones")
    args = p.parse_args()
    config = build_config({"postgres": {"url": args.url},
                           "kafka": {"bootstrap_servers": args.bootstrap}}, env={})
    import psycopg2

    with psycopg2.connect(args.url) as conn, conn.cursor() as cur:
        cur.execute(SEED, (ROWS,))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName("bench-floor")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.log.level", "WARN").getOrCreate())
    reader = spark.read.format("jdbc").options(**jdbc_options(config.postgres))
    sink = producer_options(config.kafka)
    durations = []
    for _ in range(args.warmup + args.runs):
        started = time.perf_counter()
        rows = reader.option("query", READ).load()
        (rows.selectExpr("key", "message AS value").write.format("kafka")
         .options(**sink).option("topic", args.topic).save())
        durations.append(time.perf_counter() - started)
    spark.stop()
    print(json.dumps({"durations_s": durations[args.warmup:]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
