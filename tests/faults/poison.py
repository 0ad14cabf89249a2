"""Poison cases mixed into healthy traffic, and what each policy must make of them.

Under `park` a poison message, and every later message of its partitioning key, moves
to relay_parked_messages with every byte; other keys flow. Under `block` the poison and
everything after it in its topic stay in kafka_messages, and the topic is in error with
the message id in last_error. A poison topic (missing, illegal name) is poison as a
whole. Healthy topics flow regardless.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.faults.infra import query, wait_until
from tests.faults.oracle import verdict
from tests.faults.outbox_writer import Msg, Outbox, shaped
from tests.faults.relay_proc import RelayProc

PARK_RULE = {"match": "fpark-.*", "policy": "park"}


@dataclass
class Case:
    """One topic of a poison scenario."""

    topic: str
    policy: str  # "park" or "block"
    whole_topic: bool = False  # every message is poison (missing topic, illegal name)
    what: str = ""
    poison: list[int] = field(default_factory=list)  # ids, filled in when written


@dataclass
class Expected:
    delivered: set[int]
    parked: set[int]
    remaining: set[int]
    blocked_at: dict[str, int | None]  # block topic -> first poison id (None: whole topic)


def mixed_traffic(
    outbox: Outbox, healthy: Sequence[str], cases: Sequence[Case],
    poison_for: Callable[[Case, int], Msg], *, per_topic: int, keys: int, seed: int,
) -> None:
    """Serialised transactions of 1-5 messages over every topic; each case gets its poison
    messages at a third and at two thirds of its traffic (one for a whole-topic case)."""
    rng = random.Random(seed)
    topics = [*healthy, *(c.topic for c in cases)]
    plan: list[tuple[str, int]] = [(t, i) for t in topics for i in range(per_topic)]
    rng.shuffle(plan)
    seen: dict[str, int] = dict.fromkeys(topics, 0)
    by_topic = {c.topic: c for c in cases}
    marks = {c.topic: ([] if c.whole_topic else [per_topic // 3, 2 * per_topic // 3])
             for c in cases}
    pending: list[Msg] = []
    poison_slots: list[tuple[Case, int]] = []
    for topic, _ in plan:
        n = seen[topic]
        seen[topic] += 1
        case = by_topic.get(topic)
        if case is not None and n in marks[topic]:
            poison_slots.append((case, len(pending)))
            pending.append(poison_for(case, marks[topic].index(n)))
        else:
            # Keyless shapes only where a keyless record is not itself poison.
            pending.append(shaped(topic, f"k{rng.randrange(keys)}",
                                  f"{topic}/{n}".encode() + b"." * rng.randrange(200), rng,
                                  keyless=topic not in by_topic))
    slot_of = {i: c for c, i in poison_slots}
    i = 0
    while i < len(pending):
        size = rng.randint(1, 5)
        ids = outbox.write([pending[i:i + size]])
        for offset, msg_id in enumerate(ids):
            if i + offset in slot_of:
                slot_of[i + offset].poison.append(msg_id)
        i += size


def expectations(outbox: Outbox, healthy: Sequence[str], cases: Sequence[Case]) -> Expected:
    by_topic: dict[str, list[int]] = {}
    for w in outbox.written.values():
        by_topic.setdefault(w.msg.topic, []).append(w.id)
    exp = Expected(set(), set(), set(), {})
    for topic in healthy:
        exp.delivered |= set(by_topic.get(topic, []))
    for c in cases:
        ids = sorted(by_topic.get(c.topic, []))
        if c.whole_topic:
            (exp.parked if c.policy == "park" else exp.remaining).update(ids)
            if c.policy == "block":
                exp.blocked_at[c.topic] = None
            continue
        first = min(c.poison)
        if c.policy == "block":
            exp.delivered |= {i for i in ids if i < first}
            exp.remaining |= {i for i in ids if i >= first}
            exp.blocked_at[c.topic] = first
            continue
        # park: the poison, then every later message of a key that has a parked one.
        parked_since: dict[bytes, int] = {}
        for i in ids:
            okey = outbox.written[i].msg.ordering_key
            if i in c.poison:
                exp.parked.add(i)
                if okey is not None:
                    parked_since.setdefault(okey, i)
            elif okey is not None and okey in parked_since:
                exp.parked.add(i)
            else:
                exp.delivered.add(i)
    return exp


def settled(url: str, exp: Expected) -> bool:
    """The outbox holds exactly the blocked rows, the parked table exactly the parked ones,
    and every blocked topic is in error."""
    left = {i for (i,) in query(url, "SELECT id FROM kafka_messages")}
    parked = {i for (i,) in query(url, "SELECT id FROM relay_parked_messages")}
    errored = {t for (t,) in query(url, "SELECT topic FROM kafka_topic_info "
                                   "WHERE error AND last_error IS NOT NULL")}
    return left == exp.remaining and parked == exp.parked and set(exp.blocked_at) <= errored


def describe(url: str, exp: Expected) -> str:
    left = {i for (i,) in query(url, "SELECT id FROM kafka_messages")}
    parked = {i for (i,) in query(url, "SELECT id FROM relay_parked_messages")}
    errors = query(url, "SELECT topic, error, retries, left(last_error, 200) "
                   "FROM kafka_topic_info ORDER BY topic")
    return (f"outbox extra {sorted(left - exp.remaining)[:10]} "
            f"missing {sorted(exp.remaining - left)[:10]}; "
            f"parked extra {sorted(parked - exp.parked)[:10]} "
            f"missing {sorted(exp.parked - parked)[:10]}; topics: {errors}")


@dataclass
class PoisonFigures:
    figures: dict[str, Any]
    problems: list[str]


def check(url: str, outbox: Outbox, records: list[Any], cases: Sequence[Case], exp: Expected,
          source_name: str, ledger: list[tuple[str, int, str]] | None,
          batch_size: int, broker_only: Collection[str] = (),
          topics_per_write: int = 1) -> PoisonFigures:
    """Everything the policies promise, as a list of broken promises (empty: all kept).

    On `broker_only` topics the broker refuses the poison inside a write, so a later
    batch of its partition may already be in: their order violations are measured and
    must stay within one claim; every other topic must have none.
    """
    problems: list[str] = []
    v = verdict(outbox, records, expected=exp.delivered)
    blocked_rest = exp.remaining
    ahead = [i for i in v.unexpected if i in blocked_rest]  # sent before the block held
    wrongly = [i for i in v.unexpected if i not in blocked_rest]
    if v.lost:
        problems.append(f"lost {len(v.lost)}: {v.lost[:10]}")
    if wrongly:
        problems.append(f"delivered although parked or never sendable: {wrongly[:10]}")
    if v.corrupt:
        problems.append(f"corrupt: {v.corrupt[:10]}")
    unbounded = {t: n for t, n in v.violations_by_topic.items()
                 if t not in broker_only or n > batch_size}
    if unbounded:
        problems.append(f"{sum(unbounded.values())} order violations: {unbounded}")
    # A blocked topic waits: its retries must not keep appending what follows the poison.
    # What the broker refuses fails a write whose later produce batches may be in: the
    # write itself, its topic's re-send alone, and the bisection's failing halves (n/2 +
    # n/4 + ...) append at most three claims; a retry sends the head alone. And a write
    # that fails for another topic's poison is narrowed down by bisection over the topics
    # of that write: a healthy prefix rides along in each failing half, one claim per
    # level, log2 of the topics in the write.
    levels = math.ceil(math.log2(max(topics_per_write, 1)))
    for c in cases:
        extra = v.duplicates_by_topic.get(c.topic, 0)
        bound = batch_size * ((3 if c.topic in broker_only else 1) + levels)
        if c.policy == "block" and extra > bound:
            problems.append(f"blocked topic {c.topic!r} ({c.what}): {extra} duplicate records, "
                            f"more than the bound of {bound}; retries re-append")
    # Parked rows keep every byte, with a reason and the relay's name.
    rows = query(url, "SELECT id, topic, message, key, partition_key, headers, reason, source "
                 "FROM relay_parked_messages")
    for i, topic, message, key, pkey, headers, reason, source in rows:
        w = outbox.written.get(i)
        got = (topic, _bytes(message), _bytes(key), pkey, headers)
        if w is None or got != (w.msg.topic, w.msg.value, w.msg.key, w.msg.partition_key,
                                w.msg.headers):
            problems.append(f"parked message {i} differs from what was written")
        if not reason or source != source_name:
            problems.append(f"parked message {i}: reason {reason!r}, source {source!r}")
    # Blocked topics name the poison message (or the topic's own problem).
    errors = dict(query(url, "SELECT topic, last_error FROM kafka_topic_info WHERE error"))
    for topic, first in exp.blocked_at.items():
        text = errors.get(topic) or ""
        if first is not None and f"message {first}" not in text:
            problems.append(f"blocked topic {topic!r}: last_error does not name {first}: {text}")
        if first is None and topic not in text and repr(topic) not in text:
            problems.append(f"blocked topic {topic!r}: last_error does not name it: {text}")
    for c in cases:
        if c.policy == "park" and c.topic in errors:
            problems.append(f"park topic {c.topic!r} left in error: {errors[c.topic]}")
    if ledger is not None:
        outcomes: dict[int, set[str]] = {}
        for _, i, o in ledger:
            outcomes.setdefault(i, set()).add(o)
        wrong = [i for i in exp.parked if outcomes.get(i) != {"parked"}]
        wrong += [i for i in exp.delivered if outcomes.get(i) != {"published"}]
        wrong += [i for i in exp.remaining if i in outcomes]
        if wrong:
            problems.append(f"ledger outcomes wrong for {sorted(wrong)[:10]}")
        if len(ledger) != len(outcomes):
            problems.append("the ledger has a message twice")
    figures = {
        **v.figures(),
        "parked": len(exp.parked),
        "blocked": len(exp.remaining),
        "sent_ahead_of_a_block": len(ahead),
        "lost": len(v.lost),
        "order_violations_by_topic": {_short(t, cases): n for t, n in
                                      v.violations_by_topic.items()},
        "duplicates_by_topic": {_short(t, cases): n for t, n in v.duplicates_by_topic.items()},
    }
    return PoisonFigures(figures, problems)


def _short(topic: str, cases: Sequence[Case]) -> str:
    """A topic as its case (policy and what), for the report."""
    for c in cases:
        if c.topic == topic:
            return f"{c.policy}: {c.what}"
    return "healthy"


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def run_until_settled(url: str, exp: Expected, proc: RelayProc, timeout_s: float = 900) -> float:
    started = time.monotonic()
    wait_until(lambda: settled(url, exp), timeout_s, "the policies to settle",
               interval_s=0.5, diagnose=lambda: describe(url, exp) + "\n" + proc.tail())
    return time.monotonic() - started
