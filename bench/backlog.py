"""Backlogs: the same 1 KB payloads for every contender, inserted fast on the server.

A pool of distinct payloads is copied in once; the rows are then made by
``INSERT ... SELECT generate_series`` inside PostgreSQL, so a million rows take
seconds. Row g goes to topic g mod T with key "k{g mod K}". Setup, not measured.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bench.env import connect

POOL_SIZE = 1024
PAYLOAD_BYTES = 1000
_CHUNK_ROWS = 250_000


@dataclass(frozen=True)
class Backlog:
    rows: int
    topics: tuple[str, ...]
    keys: int
    payload_bytes: int = PAYLOAD_BYTES
    # W6: every row with two user headers and a partition_key other than its key.
    headers: bool = False

    @property
    def total_bytes(self) -> int:
        return self.rows * self.payload_bytes


def payload_pool(size: int = POOL_SIZE, length: int = PAYLOAD_BYTES) -> list[bytes]:
    """Deterministic JSON-ish documents of exactly `length` bytes (half random hex)."""
    rng = random.Random(4)
    pool = []
    for i in range(size):
        head = f'{{"event":"order.updated","n":{i},"customer":"c{rng.randrange(10**6)}","data":"'
        body = rng.randbytes(length // 2).hex()
        doc = (head + body)[: length - 2] + '"}'
        pool.append(doc.encode())
    return pool


def record(g: int, backlog: Backlog, pool: Sequence[bytes]) -> tuple[str, bytes, bytes]:
    """Row g of a backlog as (topic, key, payload): what the Kafka-only limit sends."""
    return (
        backlog.topics[g % len(backlog.topics)],
        f"k{g % backlog.keys}".encode(),
        pool[g % len(pool)],
    )


def records(backlog: Backlog) -> Iterator[tuple[str, bytes, bytes]]:
    pool = payload_pool(length=backlog.payload_bytes)
    for g in range(1, backlog.rows + 1):
        yield record(g, backlog, pool)


INSERT_CHUNK = """
INSERT INTO kafka_messages (topic, message, key)
SELECT (%(topics)s::varchar[])[1 + g %% %(ntopics)s], p.payload,
       convert_to('k' || (g %% %(nkeys)s), 'UTF8')
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g
JOIN bench_pool p ON p.i = g %% %(npool)s
ORDER BY g
"""
# Row g's partition_key groups ten keys ('p<g mod K / 10>'), so it differs from the key
# and the partitioner must use it, as Deimos's producers do.
INSERT_CHUNK_HEADERS = """
INSERT INTO kafka_messages (topic, message, key, partition_key, headers)
SELECT (%(topics)s::varchar[])[1 + g %% %(ntopics)s], p.payload,
       convert_to('k' || (g %% %(nkeys)s), 'UTF8'),
       'p' || ((g %% %(nkeys)s) / 10),
       jsonb_build_object('trace-id', 't' || g, 'tenant', 'n' || (g %% 97))
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g
JOIN bench_pool p ON p.i = g %% %(npool)s
ORDER BY g
"""


def load(url: str, backlog: Backlog, settle: bool = True, at_once: bool = False) -> float:
    """Insert the backlog, vacuum and analyze it, checkpoint (unless `settle` is False: a
    backlog written while a contender runs); returns seconds taken. `at_once` commits the
    whole backlog in one transaction (written while a contender runs, so it cannot start
    on it before it is all there); otherwise each chunk commits on its own."""
    assert not (settle and at_once), "VACUUM runs outside a transaction"
    started = time.monotonic()
    pool = payload_pool(length=backlog.payload_bytes)
    conn = connect(url, autocommit=not at_once)
    try:
        with conn.cursor() as cur:
            cur.execute("SET synchronous_commit = off")
            cur.execute("CREATE TEMP TABLE bench_pool (i int PRIMARY KEY, payload bytea NOT NULL)")
            buf = io.StringIO()
            for i, payload in enumerate(pool):
                buf.write(f"{i}\t\\\\x{payload.hex()}\n")
            buf.seek(0)
            cur.copy_expert("COPY bench_pool (i, payload) FROM STDIN", buf)
            for lo in range(1, backlog.rows + 1, _CHUNK_ROWS):
                hi = min(backlog.rows, lo + _CHUNK_ROWS - 1)
                cur.execute(
                    INSERT_CHUNK_HEADERS if backlog.headers else INSERT_CHUNK,
                    {
                        "topics": list(backlog.topics),
                        "ntopics": len(backlog.topics),
                        "nkeys": backlog.keys,
                        "npool": len(pool),
                        "lo": lo,
                        "hi": hi,
                    },
                )
            if settle:
                settle_table(cur)
        if at_once:
            conn.commit()
    finally:
        conn.close()
    return time.monotonic() - started


def settle_table(cur: object) -> None:
    """What a real outbox would have had time for: vacuumed, analyzed, checkpointed."""
    execute = cur.execute  # type: ignore[attr-defined]
    execute("VACUUM (ANALYZE) kafka_messages")
    execute("CHECKPOINT")
