"""Where one message is, by id: waiting in the outbox, parked, or in the ledger (staged or
copied to Delta, with its partition and who skipped or dropped it). The notebook's
look-up cell; reads only, without Spark.

The ledger half is `ledger show`'s own reader (outbox_relay.ledger.lookup), so the notebook and
the command cannot disagree on whether, when and where a message was relayed.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from outbox_relay.control.db import Database
from outbox_relay.errors import RelayError
from outbox_relay.ledger.lookup import LedgerRecord, copied_records, merged, staged_records
from outbox_relay.ledger.show import partition_text
from outbox_relay.observe import queries


def find_message(db: Database, ledger_path: str, message_id: int) -> dict[str, Any]:
    """Every place the message is found; `delta_error` says why Delta was not read."""
    message_id = int(message_id)
    found: dict[str, list[dict[str, Any]]] = {}
    with db.transaction() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for name, statement in (("waiting", queries.MESSAGE_WAITING),
                                ("parked", queries.MESSAGE_PARKED)):
            cur.execute(statement, {"id": message_id})
            found[name] = [dict(r) for r in cur.fetchall()]
    delta_error = None
    # Staging first, as in outbox_relay.ledger.lookup.lookup; it still answers when Delta fails.
    staged = staged_records(db, message_id, None)
    try:
        records = merged(staged, copied_records(db, ledger_path, message_id, None))
    except RelayError as exc:
        records, delta_error = staged, str(exc)
    for where in ("staging", "delta"):
        found[where] = [_plain(r) for r in records if r.where == where]
    return {"message_id": message_id, **found, "delta_error": delta_error}


def _plain(record: LedgerRecord) -> dict[str, Any]:
    return {**asdict(record), "partition": partition_text(record)}
