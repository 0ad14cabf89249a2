"""``python -m bench.probes.notify_cost [--publishers 4] [--seconds 10] [--reps 3]``: what a
NOTIFY on every insert into the outbox costs the publishers (issue 49, "Waking up").

PostgreSQL takes a global lock at the commit of every transaction that notified, so
the relay could only be woken by its outbox at a price on every application that
writes to it. Publishers (threads, a connection each) insert one row per transaction
as fast as they can into a scratch database of the local stack, with a listener
draining the notifications, under three triggers in turn: none, one NOTIFY per
statement, one per row with the topic as payload. The variants alternate over
`--reps` rounds, so a drift of the machine hits each alike; the report is each
variant's commits per second (median of its rounds) and its cost against no trigger.
"""

from __future__ import annotations

import argparse
import json
import select
import statistics
import threading
import time
from typing import Any

import psycopg2
import psycopg2.extensions

from bench.stack import scratch_database

CHANNEL = "relay_outbox"
VARIANTS: dict[str, str | None] = {
    "none": None,
    "per statement": f"""
        CREATE FUNCTION bench_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$;
        CREATE TRIGGER bench_notify AFTER INSERT ON kafka_messages
        FOR EACH STATEMENT EXECUTE FUNCTION bench_notify();""",
    "per row, topic as payload": f"""
        CREATE FUNCTION bench_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_notify('{CHANNEL}', NEW.topic); RETURN NULL; END $$;
        CREATE TRIGGER bench_notify AFTER INSERT ON kafka_messages
        FOR EACH ROW EXECUTE FUNCTION bench_notify();""",
}
DROP = ("DROP TRIGGER IF EXISTS bench_notify ON kafka_messages; "
        "DROP FUNCTION IF EXISTS bench_notify();")
INSERT = "INSERT INTO kafka_messages (topic, key, message) VALUES ('bench.notify', %s, %s)"


def _publisher(url: str, until: float, counts: list[int], slot: int) -> None:
    conn = psycopg2.connect(url)
    n = 0
    try:
        with conn.cursor() as cur:
            while time.monotonic() < until:
                cur.execute(INSERT, (f"k{n}".encode(), b"x" * 1000))
                conn.commit()
                n += 1
    finally:
        conn.close()
    counts[slot] = n


def _listener(url: str, stop: threading.Event, got: list[int]) -> None:
    conn = psycopg2.connect(url)
    conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
    with conn.cursor() as cur:
        cur.execute(f"LISTEN {CHANNEL}")  # a constant channel name
    while not stop.is_set():
        if select.select([conn], [], [], 0.1)[0]:
            conn.poll()
            got[0] += len(conn.notifies)
            conn.notifies.clear()
    conn.close()


def _round(url: str, trigger: str | None, publishers: int, seconds: float) -> dict[str, Any]:
    admin = psycopg2.connect(url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(DROP)
        if trigger is not None:
            cur.execute(trigger)
        cur.execute("TRUNCATE kafka_messages")
    stop, got = threading.Event(), [0]
    listener = threading.Thread(target=_listener, args=(url, stop, got))
    listener.start()
    counts = [0] * publishers
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=_publisher, args=(url, until, counts, i))
               for i in range(publishers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(0.5)
    stop.set()
    listener.join()
    with admin.cursor() as cur:
        cur.execute(DROP)
    admin.close()
    return {"commits_per_s": round(sum(counts) / seconds), "notifications": got[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    with scratch_database("notify") as url:
        for _ in range(args.reps):
            for name, trigger in VARIANTS.items():
                rounds[name].append(_round(url, trigger, args.publishers, args.seconds))
    base = statistics.median(r["commits_per_s"] for r in rounds["none"])
    report = {}
    for name, got in rounds.items():
        rate = statistics.median(r["commits_per_s"] for r in got)
        report[name] = {"commits_per_s": rate, "rounds": [r["commits_per_s"] for r in got],
                        "against_none": round(rate / base - 1, 3),
                        "notifications": [r["notifications"] for r in got]}
    print(json.dumps({"publishers": args.publishers, "seconds": args.seconds,
                      "variants": report}, indent=1))


if __name__ == "__main__":
    main()
