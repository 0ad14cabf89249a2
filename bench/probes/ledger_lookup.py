"""``python -m bench.probes.ledger_lookup [--records 10000000]``: how long `ledger show` and
`status` take on a big ledger.

Builds a Delta ledger of N records shaped like the relay's (its schema, one commit per
copy batch, one small file per commit, a checkpoint every 10 commits as delta-spark
leaves them), stages records in a scratch PostgreSQL database of the local stack
(RELAY_STACK_DIR, else the default), then times `outbox-relay ledger show` as a
subprocess, as an operator runs it: hits in Delta, hits in staging, misses, with and
without --topic; and `status`, whose rates count the ledger's last hour (7.2M rows of
the 10M). Then compacts the table (OPTIMIZE + VACUUM) and times them again.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg2
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench.stack import scratch_database
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.ledger import staging

STAGE = """
INSERT INTO relay_ledger_staging (session_id, topic, outcome, ids, source)
VALUES (%s, %s, 'published', %s, 'bench')
"""
TOPIC_INFO = "INSERT INTO kafka_topic_info (topic, last_processed_at) VALUES (%s, now())"
SCHEMA = pa.schema([
    ("topic", pa.string()), ("message_id", pa.int64()), ("outcome", pa.string()),
    ("session_id", pa.string()), ("source", pa.string()),
    ("relayed_at", pa.timestamp("us", tz="UTC")), ("copy_batch", pa.int64()),
    ("origin", pa.string()), ("kafka_partition", pa.int32()),
    ("topic_partitions", pa.int32()), ("partitioner", pa.string()), ("actor", pa.string()),
])
PARTITIONS = 12
COPY_GAP = dt.timedelta(seconds=10)


def topic_of(message_id: int, topics: int) -> str:
    return f"bench.orders-{message_id * 7919 % topics}"


def batch(first: int, n: int, copy_batch: int, topics: int, origin: str,
          at: dt.datetime) -> pa.RecordBatch:
    """One copy batch: the rows of its staged records, a record per (session, topic)."""
    ids = sorted(range(first, first + n), key=lambda i: (topic_of(i, topics), i))
    sessions = {t: str(uuid.uuid4()) for t in {topic_of(i, topics) for i in ids}}
    return pa.RecordBatch.from_pydict({
        "topic": [topic_of(i, topics) for i in ids], "message_id": ids,
        "outcome": ["published"] * n, "session_id": [sessions[topic_of(i, topics)] for i in ids],
        "source": ["relay-bench"] * n, "relayed_at": [at] * n, "copy_batch": [copy_batch] * n,
        "origin": [origin] * n, "kafka_partition": [i % PARTITIONS for i in ids],
        "topic_partitions": [PARTITIONS] * n, "partitioner": ["murmur2"] * n,
        "actor": [None] * n,
    }, schema=SCHEMA)


def build_ledger(path: str, records: int, per_copy: int, topics: int, origin: str) -> None:
    """Copies COPY_GAP apart, the last one now: at 20,000 rows a copy, the last hour holds
    7.2M rows (2,000 msg/s), which `status` counts for its rates."""
    copies = (records + per_copy - 1) // per_copy
    t0 = time.monotonic()
    start = dt.datetime.now(dt.UTC) - COPY_GAP * copies
    for k in range(copies):
        first = k * per_copy + 1
        n = min(per_copy, records - first + 1)
        at = start + COPY_GAP * (k + 1)
        write_deltalake(path, batch(first, n, k + 1, topics, origin, at), mode="append",
                        configuration={"delta.checkpointInterval": "10"} if k == 0 else None)
        if (k + 1) % 100 == 0:
            print(f"  {k + 1}/{copies} copies ({time.monotonic() - t0:.0f} s)", flush=True)


def stage(url: str, first: int, records: int, per_record: int, topics: int) -> None:
    """Records waiting for their copy: ids above those in Delta, a record per topic; and
    each topic's kafka_topic_info row, as the relay leaves one, so `status` lists it."""
    conn = psycopg2.connect(url)
    with conn, conn.cursor() as cur:
        cur.executemany(TOPIC_INFO, [(f"bench.orders-{t}",) for t in range(topics)])
        for start in range(first, first + records * per_record, per_record):
            ids = list(range(start, start + per_record))
            cur.execute(STAGE, (str(uuid.uuid4()), topic_of(start, topics), ids))
    conn.close()


def command(profile: Path, *args: str) -> tuple[float, int]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "outbox_relay.cli", "--config", str(profile), *args],
        capture_output=True, text=True)
    return time.monotonic() - t0, done.returncode


def status_counted(profile: Path) -> str:
    """What `status` read of the ledger: the check that its timing is of a real read."""
    done = subprocess.run([sys.executable, "-m", "outbox_relay.cli", "--config", str(profile),
                           "status", "--json"], capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    last_hour = sum(t["ledger"]["per_min_60m"] * 60 for t in report["topics"])
    return (f"status counted {last_hour:,.0f} messages in the last hour over "
            f"{len(report['topics'])} topics (Delta version {report['ledger']['delta_version']},"
            f" error {report['ledger']['delta_error']})")


def time_cases(profile: Path, cases: list[tuple[str, list[str]]], runs: int) -> None:
    for label, args in cases:
        times = sorted(command(profile, *args)[0] for _ in range(runs))
        code = command(profile, *args)[1]
        print(f"  {label:<44} exit {code:>2}  median {times[len(times) // 2]:.2f} s  "
              f"max {times[-1]:.2f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.ledger_lookup")
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--per-copy", type=int, default=20_000, help="rows per copy batch (file)")
    p.add_argument("--topics", type=int, default=50)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--keep", help="build the ledger here and keep it (default: a temp dir)")
    args = p.parse_args(argv)
    n = args.records
    with tempfile.TemporaryDirectory() as tmp, scratch_database("lookup") as url:
        db = Database(build_config({"postgres": {"url": url}}, env={}).postgres)
        origin = staging.origin(db)
        db.close()
        path = args.keep or str(Path(tmp) / "ledger")
        profile = Path(tmp) / "profile.toml"
        profile.write_text(f'[postgres]\nurl = "{url}"\nsslmode = "disable"\n'
                           f'[ledger]\npath = "{path}"\n')
        print(f"building a ledger of {n:,} records, {args.per_copy:,} per copy", flush=True)
        build_ledger(path, n, args.per_copy, args.topics, origin)
        stage(url, n + 1, 200, 500, args.topics)
        hit = random.Random(1).randint(1, n)
        staged = n + 1 + 200 * 500 // 2
        show = ["ledger", "show"]
        cases = [
            ("status (rates over the last hour's rows)", ["status"]),
            ("--id (in Delta)", [*show, "--id", str(hit)]),
            ("--topic T --id (in Delta)", [*show, "--topic", topic_of(hit, args.topics),
                                           "--id", str(hit)]),
            ("--id (staged)", [*show, "--id", str(staged)]),
            ("--topic T --id (staged)", [*show, "--topic",
                                         topic_of(n + 1 + 100 * 500, args.topics),
                                         "--id", str(staged)]),
            ("--id (miss)", [*show, "--id", str(n * 3)]),
            ("--topic T --id (miss: other topic)", [*show, "--topic", "bench.none", "--id",
                                                    str(hit)]),
        ]
        table = DeltaTable(path)
        print(f"as the copies leave it: {len(table.file_uris())} files, "
              f"version {table.version()}")
        time_cases(profile, cases, args.runs)
        print(" ", status_counted(profile))
        table.optimize.compact()
        table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        table = DeltaTable(path)
        print(f"compacted: {len(table.file_uris())} files, version {table.version()}")
        time_cases(profile, cases, args.runs)
        print(" ", status_counted(profile))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RELAY_LOG_LEVEL", "WARNING")
    sys.exit(main())
