"""Where one message is, by id: waiting in the outbox, parked, staged in the ledger, in
the Delta ledger. The notebook's look-up cell; reads only, without Spark.

A small reader over the status module's statements: `ledger show` is the full answer
(partitions, who skipped or dropped it) and the place to grow this.
"""

from __future__ import annotations

from typing import Any

from relay.control.db import Database
from relay.ledger.staging import ORIGIN
from relay.observe import queries
from relay.observe.ledger_rates import read_delta


def find_message(db: Database, ledger_path: str, message_id: int) -> dict[str, Any]:
    """Every place the message is found; `delta_error` says why Delta was not read."""
    message_id = int(message_id)
    params = {"id": message_id}
    with db.transaction() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        found: dict[str, list[dict[str, Any]]] = {}
        for name, statement in (("waiting", queries.MESSAGE_WAITING),
                                ("parked", queries.MESSAGE_PARKED),
                                ("staged", queries.MESSAGE_STAGED)):
            cur.execute(statement, params)
            found[name] = [dict(r) for r in cur.fetchall()]
        cur.execute(ORIGIN)
        origin = str(cur.fetchone()["origin"])
    read = read_delta(
        ledger_path,
        lambda origin_column: queries.DELTA_MESSAGE.format(origin=origin_column,
                                                           message_id=message_id),
        ("origin", "topic", "outcome", "session_id", "source", "relayed_at", "copy_batch"),
    )
    # Another outbox sharing the ledger path has ids of its own.
    delta = [r for r in read.rows if r["origin"] in (None, origin)]
    return {"message_id": message_id, **found, "delta": delta, "delta_error": read.error}
