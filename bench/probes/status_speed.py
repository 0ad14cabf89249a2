"""How fast `outbox-relay status` answers on a big outbox (issue 11: under 1 s at 10M rows).

``python -m bench.probes.status_speed [--rows 10000000] [--topics 10] [--repeat 5] [--keep]``

Fills a scratch database of the local stack (RELAY_STACK_DIR picks another) with
`INSERT ... SELECT generate_series`, in chunks, then times `status` twice over: as the
CLI a user runs (a new process: Python's start, the config, the connection, the queries,
the output) and as the snapshot alone, in this process. Each is measured with the
visibility map empty (the table as it was just filled: every counted row needs a heap
fetch) and after VACUUM (index-only counts). Prints one JSON object; `--out` writes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.stack import REPO, connect, scratch_database
from outbox_relay.config.load import build_config
from outbox_relay.control.db import Database
from outbox_relay.observe.status import take_snapshot

FILL = """
INSERT INTO kafka_messages (topic, message, key, created_at)
SELECT 'status.' || (g %% %(topics)s), convert_to(repeat('x', 200), 'UTF8'),
       convert_to('k' || (g %% 1000), 'UTF8'),
       now() AT TIME ZONE 'UTC' - make_interval(secs => (%(last)s - g) / 10000.0)
FROM generate_series(%(first)s, %(last)s) AS g
"""
CHUNK = 1_000_000


def fill(url: str, rows: int, topics: int) -> float:
    started = time.monotonic()
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            for first in range(1, rows + 1, CHUNK):
                last = min(rows, first + CHUNK - 1)
                cur.execute(FILL, {"topics": topics, "first": first, "last": last})
                print(f"filled {last:,} of {rows:,} rows", file=sys.stderr, flush=True)
    finally:
        conn.close()
    return time.monotonic() - started


def vacuum(url: str) -> None:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("VACUUM (ANALYZE) kafka_messages")
    finally:
        conn.close()


def time_cli(profile: Path, repeat: int) -> dict[str, Any]:
    """Wall time of `outbox-relay status --json`, a fresh process each time."""
    times, out = [], ""
    for _ in range(repeat):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "outbox_relay.cli", "--config", str(profile), "status",
             "--json"],
            cwd=REPO, capture_output=True, text=True, check=False)
        times.append(time.monotonic() - started)
        if done.returncode not in (0, 16):
            raise RuntimeError(f"status exited {done.returncode}: {done.stderr[-2000:]}")
        out = done.stdout
    report = json.loads(out)
    return {"median_s": statistics.median(times), "max_s": max(times),
            "topics": len(report["topics"]),
            "backlog": sum(t["backlog"] for t in report["topics"]),
            "estimated_topics": sum(not t["backlog_exact"] for t in report["topics"])}


def time_snapshot(db: Database, ledger: str, repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        started = time.monotonic()
        take_snapshot(db, 60.0, ledger, with_rates=True)
        times.append(time.monotonic() - started)
    return {"median_s": statistics.median(times), "max_s": max(times)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.status_speed")
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--topics", type=int, default=10)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--keep", action="store_true", help="keep the scratch database")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)

    work = REPO / ".relay-data" / "status-speed"
    work.mkdir(parents=True, exist_ok=True)
    with scratch_database("status", keep=args.keep) as url:
        profile = work / "profile.toml"
        ledger = str(work / "ledger")  # none yet: delta-rs answers "no table"
        profile.write_text(f'[postgres]\nurl = "{url}"\nsslmode = "disable"\n\n'
                           f'[ledger]\npath = "{ledger}"\n', encoding="utf-8")
        db = Database(build_config({"postgres": {"url": url, "sslmode": "disable"}},
                                   env={}).postgres, "bench-status")
        try:
            result: dict[str, Any] = {"rows": args.rows, "topics": args.topics,
                                      "fill_s": fill(url, args.rows, args.topics)}
            for phase in ("visibility_map_empty", "after_vacuum"):
                if phase == "after_vacuum":
                    vacuum(url)
                result[phase] = {"cli": time_cli(profile, args.repeat),
                                 "snapshot": time_snapshot(db, ledger, args.repeat)}
                print(f"{phase}: {result[phase]}", file=sys.stderr, flush=True)
        finally:
            db.close()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
