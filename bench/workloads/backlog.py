"""The backlogs every drain starts from, written as an application writes its outbox: by
one connection, in ordinary 500-row transactions, topics interleaved. Row g goes to topic
g mod T with key k<g mod 10,000>; two rows in three have a `partition_key` equal to the
key; its 1 KB payload starts with {"n":<g>, for the read-back (bench/oracle.py).

Two states of the table before each contender, both vacuumed and analysed, then
checkpointed so that no contender shares the disk with the fill's flush:

- with a history (`history=True`): the table as a user's outbox has it, having held and
  deleted rows while it was written to. The first half is written while an earlier
  backlog (a topic no contender serves) still fills the table's front, the second half
  after that one was deleted and vacuumed, into the space it freed. The ids then do not
  follow the table's physical order (their correlation is about -0.5), and PostgreSQL
  plans the peer's select on `(topic, id)`, as on a user's outbox;
- in id order: the table vacuumed first, then written, so its ids follow its physical
  order (a correlation of 1.0), as a new outbox, or one whose history vacuum has
  cleared. PostgreSQL may then plan the peer's select on the primary key, walking the
  other topics' rows and the dead entries of the rows it deleted before
  (docs/performance.md, "The peer's dead-index walk").
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.peer import BATCH_SIZE, RETRIEVE
from bench.stack import Stack, connect

KEYS, TX_ROWS = 10_000, 500

FILL = """
INSERT INTO kafka_messages (topic, message, key, partition_key, created_at, updated_at)
SELECT (%(topics)s::varchar[])[1 + g %% %(ntopics)s],
       convert_to(rpad('{"n":' || g || ',"d":"', 998, md5(g::text)) || '"}', 'UTF8'),
       convert_to('k' || (g %% %(nkeys)s), 'UTF8'),
       CASE WHEN g %% 3 = 0 THEN NULL ELSE 'k' || (g %% %(nkeys)s) END, now(), now()
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g ORDER BY g
"""


def fill(stack: Stack, topics: Sequence[str], rows: int, history: bool = False,
         first_row: int = 0, checkpoint: bool = True) -> None:
    """`rows` over `topics`, on the table with a history or in id order (above); in id
    order, the rows' numbers start at `first_row` (each database's of MANY its own).
    Without `checkpoint`, the caller checkpoints (`checkpointed`) once it has filled
    every database it fills."""
    conn = connect(stack.url, autocommit=False)
    try:
        with conn.cursor() as cur:
            def write(lo: int, hi: int, into: Sequence[str]) -> None:
                for first in range(lo, hi, TX_ROWS):
                    cur.execute(FILL, {"topics": list(into), "ntopics": len(into),
                                       "nkeys": KEYS, "lo": first,
                                       "hi": min(hi, first + TX_ROWS) - 1})
                    conn.commit()

            def autocommitted(statement: str) -> None:
                conn.autocommit = True
                cur.execute(statement)
                conn.autocommit = False

            if history:
                earlier = [f"{topics[0]}.history"]
                write(0, rows // 2, earlier)
                write(0, rows // 2, topics)
                cur.execute("DELETE FROM kafka_messages WHERE topic = %s", earlier)
                conn.commit()
                autocommitted("VACUUM kafka_messages")
                write(rows // 2, rows, topics)
            else:
                autocommitted("VACUUM kafka_messages")  # the previous contender's dead rows
                write(first_row, first_row + rows, topics)
            autocommitted("VACUUM ANALYZE kafka_messages")
    finally:
        conn.close()
    if checkpoint:
        checkpointed(stack)


def checkpointed(stack: Stack) -> None:
    """The fill dirtied up to 1.5 GB: flushed now, not by the checkpointer beside the
    contender's first rounds. A checkpoint is the server's, every database's at once."""
    conn = connect(stack.url)
    try:
        with conn.cursor() as cur:
            cur.execute("CHECKPOINT")
    finally:
        conn.close()


def peer_plan(stack: Stack, topic: str) -> str:
    """The scans of the peer select's plan on the table as filled, without their costs:
    on the primary key, its walk slows down as it deletes (bench/peer.py RETRIEVE)."""
    conn = connect(stack.url)
    try:
        with conn.cursor() as cur:
            cur.execute("EXPLAIN " + RETRIEVE, (topic, BATCH_SIZE))
            lines = [r[0].strip(" ->").split("  (cost=")[0] for r in cur.fetchall()]
    finally:
        conn.close()
    return "; ".join(line for line in lines if "Scan" in line)
