"""Operator verbs: topics, parked messages and a peek at the outbox, without sending."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from relay.config_load import load_config
from relay.control import parking
from relay.control.db import Database
from relay.control.locks import CLEAR_ERROR, FORCE_UNLOCK
from relay.control.pending import TopicFilter, pending_topics
from relay.exit_codes import ExitCode

Command = Callable[[argparse.Namespace], int]


@contextmanager
def _db(args: argparse.Namespace) -> Iterator[Database]:
    db = Database(load_config(args.config).postgres, "outbox-relay-cli")
    try:
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
    config = load_config(args.config)
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
        if not args.yes and not _confirm(f"drop {len(args.ids)} parked message(s) for good?"):
            print("nothing dropped")
            return ExitCode.DECLINED
        print(f"dropped {len(parking.drop(db, args.ids))} message(s)")
        return ExitCode.OK


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print("refusing to drop without --yes when not on a terminal", file=sys.stderr)
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

    peek = sub.add_parser("peek", help="view outbox messages without sending them")
    peek.add_argument("--topic", required=True)
    peek.add_argument("--from-id", type=int, default=0)
    peek.add_argument("--to-id", type=int, default=2**63 - 1)
    peek.add_argument("--limit", type=int, default=100)
    peek.set_defaults(fn=_peek)
