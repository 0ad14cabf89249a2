"""The checks every scenario shares, on what an independent consumer read back
(tests/kafka_readback.py) against what the outbox held: lost, duplicated, corrupt, and
per-key order of first appearances; and the ledger's entries, read through Spark."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from outbox_relay.config import Config
from outbox_relay.control.db import Database
from tests.faults.outbox_writer import Outbox
from tests.kafka_readback import Received, consume, high_watermarks

__all__ = ["Record", "Verdict", "high_watermarks", "ledger_entries", "read_all", "verdict"]

# A record read back, as the fault scenarios name it.
Record = Received


def read_all(bootstrap: str, topics: Sequence[str], timeout_s: float = 300.0,
             conf: Mapping[str, str] | None = None) -> list[Record]:
    """Every record of `topics` up to their current end: the shared reader, waiting for
    no count first. `conf` adds client settings (e.g. SASL credentials)."""
    return consume(bootstrap, topics, 0, timeout_s,
                   {"fetch.max.bytes": str(16 * 1024 * 1024), **(conf or {})})


@dataclass
class Verdict:
    """What an independent consumer saw, against what the outbox held."""

    written: int
    expected: int
    delivered: int
    duplicates: int  # records beyond the first of each id
    lost: list[int]
    unexpected: list[int]  # delivered although they should not be (e.g. parked)
    corrupt: list[int]  # delivered with other bytes, key or topic than written
    copies: Counter[int]
    order_violations: int  # messages whose first appearance broke invariant 2
    worst_key_violations: int  # the most in one key
    keys_split: int  # keys found in more than one partition
    violations_by_topic: Counter[str] = field(default_factory=Counter)
    duplicates_by_topic: Counter[str] = field(default_factory=Counter)

    def figures(self) -> dict[str, Any]:
        return {
            "written": self.written,
            "expected": self.expected,
            "delivered": self.delivered,
            "duplicated": self.duplicates,
            "lost": len(self.lost),
            "order_violations": self.order_violations,
            "worst_key_order_violations": self.worst_key_violations,
        }

    @property
    def duplicated_ids(self) -> set[int]:
        return {i for i, n in self.copies.items() if n > 1}

    def assert_clean(self, max_duplicates: int | None = 0) -> None:
        assert not self.lost, f"{len(self.lost)} messages lost, e.g. {self.lost[:10]}"
        assert not self.unexpected, f"delivered but should not be: {self.unexpected[:10]}"
        assert not self.corrupt, f"delivered with other bytes: {self.corrupt[:10]}"
        assert self.order_violations == 0, (
            f"{self.order_violations} per-key order violations "
            f"(worst key: {self.worst_key_violations})")
        assert self.keys_split == 0, f"{self.keys_split} keys spread over partitions"
        if max_duplicates is not None:
            assert self.duplicates <= max_duplicates, (
                f"{self.duplicates} duplicates, more than the bound {max_duplicates}")


def totals(verdicts: Mapping[str, Verdict]) -> dict[str, Any]:
    """The report's columns summed over several databases' verdicts (the worst key's
    violations: the most of any)."""
    figures = [v.figures() for v in verdicts.values()]
    keys = ("written", "expected", "delivered", "duplicated", "lost", "order_violations")
    summed: dict[str, Any] = {k: sum(f[k] for f in figures) for k in keys}
    summed["worst_key_order_violations"] = max(f["worst_key_order_violations"]
                                               for f in figures)
    return summed


def verdict(outbox: Outbox, records: Sequence[Record],
            expected: set[int] | None = None) -> Verdict:
    """Compare what was delivered with what was written.

    `expected` are the ids that should arrive (default: every id written). Order: for
    each topic and partitioning key, a message's first appearance must come after the
    first appearance of every message of a transaction that committed before its own
    began, and after the lower ids of its own transaction.
    """
    expected = outbox.ids() if expected is None else expected
    copies: Counter[int] = Counter()
    first: dict[int, Record] = {}
    corrupt: list[int] = []
    ordered = sorted(records, key=lambda r: (r.topic, r.partition, r.offset))
    for r in ordered:
        i = r.outbox_id
        copies[i] += 1
        if i in first:
            continue
        first[i] = r
        w = outbox.written.get(i)
        if w is None or (w.msg.topic, w.msg.key, w.msg.value) != (r.topic, r.key, r.value):
            corrupt.append(i)
    lost = sorted(expected - set(first))
    unexpected = sorted(set(first) - expected)
    violations, worst, split, by_topic = _order(outbox, first)
    dup_topics: Counter[str] = Counter()
    for i, n in copies.items():
        if n > 1:
            dup_topics[first[i].topic] += n - 1
    return Verdict(
        written=len(outbox.written), expected=len(expected),
        delivered=len(set(first) & expected), duplicates=sum(copies.values()) - len(copies),
        lost=lost, unexpected=unexpected, corrupt=corrupt, copies=copies,
        order_violations=violations, worst_key_violations=worst, keys_split=split,
        violations_by_topic=by_topic, duplicates_by_topic=dup_topics,
    )


def _order(outbox: Outbox, first: dict[int, Record]) -> tuple[int, int, int, Counter[str]]:
    groups: dict[tuple[str, bytes], list[int]] = defaultdict(list)
    for i in first:
        w = outbox.written.get(i)
        if w is not None and w.msg.ordering_key is not None:
            groups[(w.msg.topic, w.msg.ordering_key)].append(i)
    total = worst = split = 0
    by_topic: Counter[str] = Counter()
    for (topic, _), ids in groups.items():
        if len({first[i].partition for i in ids}) > 1:
            split += 1
            continue
        pos = {i: first[i].offset for i in ids}
        bad = _violations(outbox, ids, pos)
        total += bad
        worst = max(worst, bad)
        if bad:
            by_topic[topic] += bad
    return total, worst, split, by_topic


def _violations(outbox: Outbox, ids: list[int], pos: dict[int, int]) -> int:
    """Messages of one key whose first appearance precedes one that must come earlier."""
    txs = outbox.transactions

    def commit(i: int) -> int:
        seq = txs[outbox.written[i].tx].commit_seq
        return seq if seq is not None else 2**62  # never committed: orders nothing

    by_commit = sorted(ids, key=commit)
    commits = [commit(i) for i in by_commit]
    prefix_max: list[int] = []
    best = -1
    for i in by_commit:
        best = max(best, pos[i])
        prefix_max.append(best)
    bad = 0
    in_tx_max: dict[int, int] = {}
    for i in sorted(ids):
        w = outbox.written[i]
        tx = txs[w.tx]
        # Transactions that committed before this one began.
        n = bisect.bisect_left(commits, tx.begin_seq)
        before = prefix_max[n - 1] if n else -1
        earlier_in_tx = in_tx_max.get(w.tx, -1)
        if before > pos[i] or earlier_in_tx > pos[i]:
            bad += 1
        in_tx_max[w.tx] = max(earlier_in_tx, pos[i])
    return bad


def ledger_entries(spark: Any, config: Config) -> list[tuple[str, int, str]]:
    """Copy what is still staged to Delta, then every ledger row as (topic, id, outcome)."""
    from outbox_relay.ledger.delta import Ledger

    db = Database(config.postgres, "fault-ledger-check")
    try:
        ledger = Ledger(spark, config, db)
        ledger.flush()
        if not ledger.exists():
            return []
        rows = ledger.table().select("topic", "message_id", "outcome").collect()
        return [(r.topic, int(r.message_id), str(r.outcome)) for r in rows]
    finally:
        db.close()
