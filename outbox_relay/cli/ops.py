"""Operator verbs: topics, parked messages, a peek at the outbox, and skipping messages unsent."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from outbox_relay.control import parking, skipping
from outbox_relay.control.db import Database
from outbox_relay.control.locks import CLEAR_ERROR, FORCE_UNLOCK
from outbox_relay.control.migrate import require_current
from outbox_relay.control.pending import TopicFilter, pending_topics
from outbox_relay.exit_codes import ExitCode
from outbox_relay.options import one_profile

Command = Callable[[argparse.Namespace], int]


@contextmanager
def _db(args: argparse.Namespace) -> Iterator[Database]:
    db = Database(one_profile(args).postgres, "outbox-relay-cli")
    try:
        require_current(db)
        yield db
    finally:
        db.close()


def _topics(args: argparse.Namespace) -> int:
    if args.topics_cmd in ("retry", "unlock"):
        statement = CLEAR_ERROR if args.topics_cmd == "retry" else FORCE_UNLOCK
        with _db(args) as db:
            done = db.all(statement, (args.topic,))
        if not done:
            print(f"no topic {args.topic!r} in kafka_topic_info", file=sys.stderr)
            return ExitCode.NOT_FOUND
        print(
            f"topic {args.topic!r}: {'error cleared' if args.topics_cmd == 'retry' else 'unlocked'}"
        )
        return ExitCode.OK
    config = one_profile(args)
    with _db(args) as db:
        states = pending_topics(db, config.relay.lock_timeout_s, TopicFilter([".*"], []))
    for s in states:
        detail = s.locked_by if s.state == "locked" else (s.last_error or "")
        print(f"{s.topic}\t{s.state}\tretries={s.retries}\t{detail}")
    return ExitCode.OK


def _parked(args: argparse.Namespace) -> int:
    with _db(args) as db:
        if args.parked_cmd == "list":
            for r in parking.list_parked(db, args.topic):
                print(
                    f"{r['id']}\t{r['topic']}\t{r['bytes']} bytes\tattempts={r['attempts']}"
                    f"\t{r['parked_at']:%Y-%m-%d %H:%M:%S}\t{r['reason']}"
                )
            return ExitCode.OK
        if args.parked_cmd == "requeue":
            if not args.ids and args.topic is None:
                print("give message ids or --topic", file=sys.stderr)
                return ExitCode.USAGE
            new = parking.requeue(db, args.ids, args.topic)
            more = "…" if len(new) > 10 else ""
            print(f"requeued {len(new)} message(s) with new ids {new[:10]}{more}")
            return ExitCode.OK
        if not args.yes and not _confirm(f"drop {len(args.ids)} parked message(s) for good?",
                                         "drop"):
            print("nothing dropped")
            return ExitCode.DECLINED
        source = one_profile(args).relay.source_name
        dropped = parking.drop(db, args.ids, source, skipping.actor())
        print(f"dropped {len(dropped)} message(s)")
        gone = sorted(set(args.ids) - set(dropped))
        if gone:
            print(f"not parked (nothing to drop): {_ids(gone)}", file=sys.stderr)
        return ExitCode.OK


def _skip(args: argparse.Namespace) -> int:
    """Skips what exists and names what does not: an id's exit code is the same whether it
    is named alone or among others (NOT_FOUND as soon as one is missing, as `rm` does)."""
    config = one_profile(args)
    with _db(args) as db:
        waiting = skipping.find(db, args.ids)
        if not waiting:
            _report_missing(db, sorted(set(args.ids)))
            return ExitCode.NOT_FOUND
        for topic in sorted(set(waiting.values())):
            print(f"topic {topic!r}: {_ids([i for i, t in waiting.items() if t == topic])}")
        question = (f"skip {len(waiting)} message(s) for good, without sending them? Later "
                    "messages of their keys will be sent without them")
        if not args.yes and not _confirm(question, "skip"):
            print("nothing skipped")
            return ExitCode.DECLINED
        result = skipping.skip(db, sorted(waiting), source=config.relay.source_name,
                               actor=skipping.actor(), lock_timeout_s=config.relay.lock_timeout_s,
                               wait_s=args.wait_s)
        if result.busy:
            _report_busy(result.busy)
            return ExitCode.BUSY
        print(f"skipped {len(result.skipped)} message(s), recorded in the ledger as skipped")
        missing = sorted(set(args.ids) - set(result.skipped))
        if missing:
            _report_missing(db, missing)
            return ExitCode.NOT_FOUND
        return ExitCode.OK


def _report_missing(db: Database, ids: list[int]) -> None:
    parked = skipping.parked_among(db, ids)
    rest = [i for i in ids if i not in parked]
    if rest:
        print(f"not in the outbox (sent, skipped, or never there): {_ids(rest)}",
              file=sys.stderr)
    if parked:
        print(f"parked, not in the outbox (see `parked drop`): {_ids(parked)}", file=sys.stderr)


def _report_busy(busy: list[skipping.Busy]) -> None:
    print("nothing skipped: a relay is working on these messages", file=sys.stderr)
    for b in busy:
        since = f"{b.since:%Y-%m-%d %H:%M:%S} UTC"
        what = (f"message {b.id} is in a live session of {b.holder} (claimed {since})"
                if b.id is not None else f"topic {b.topic!r} is locked by {b.holder} since {since}")
        print(f"  {what}", file=sys.stderr)
    print("try again once the lock is released (--wait-s waits for it); a lock nobody renews "
          "expires after relay.lock_timeout_s", file=sys.stderr)


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:20])) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")


def _confirm(question: str, verb: str) -> bool:
    if not sys.stdin.isatty():
        print(f"refusing to {verb} without --yes when not on a terminal", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _peek(args: argparse.Namespace) -> int:
    with _db(args) as db:
        rows = parking.peek(db, args.topic, args.from_id, args.to_id, args.limit)
    for r in rows:
        key = r["key"].tobytes().decode("utf-8", "replace") if r["key"] is not None else None
        print(
            f"{r['id']}\tkey={key!r}\tpartition_key={r['partition_key']!r}\t"
            f"{r['bytes'] or 0} bytes\theaders={r['headers']}\t{r['preview']!r}"
        )
    return ExitCode.OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = sub.add_parser("topics", help="topics with rows waiting; retry or unlock one")
    tsub = topics.add_subparsers(dest="topics_cmd")
    for verb, text in (("retry", "clear a topic's error now"), ("unlock", "force-release a lock")):
        tsub.add_parser(verb, help=text).add_argument("topic")
    topics.set_defaults(fn=_topics)

    parked = sub.add_parser("parked", help="the dead-letter table of the park policy")
    psub = parked.add_subparsers(dest="parked_cmd", required=True)
    psub.add_parser("list").add_argument("--topic")
    requeue = psub.add_parser("requeue", help="back into the outbox, with new ids")
    requeue.add_argument("ids", nargs="*", type=int)
    requeue.add_argument("--topic")
    drop = psub.add_parser("drop", help="delete parked messages for good")
    drop.add_argument("ids", nargs="+", type=int)
    drop.add_argument("--yes", action="store_true", help="do not ask")
    parked.set_defaults(fn=_parked)

    skip = sub.add_parser("skip", help="remove messages from the outbox without sending them "
                          "(recorded in the ledger as skipped, with who and when)")
    skip.add_argument("ids", nargs="+", type=int)
    skip.add_argument("--yes", action="store_true", help="do not ask")
    skip.add_argument("--wait-s", type=float, default=0.0,
                      help="while a relay holds a topic's lock, try again for this long")
    skip.set_defaults(fn=_skip)

    peek = sub.add_parser("peek", help="view outbox messages without sending them")
    peek.add_argument("--topic", required=True)
    peek.add_argument("--from-id", type=int, default=0)
    peek.add_argument("--to-id", type=int, default=2**63 - 1)
    peek.add_argument("--limit", type=int, default=100)
    peek.set_defaults(fn=_peek)
