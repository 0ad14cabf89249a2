"""Finds the topics whose part of a failed combined write fails, with few re-sends.

Bisection over the batch's topics: a group that goes through is acknowledged, a group
that fails is split in halves, until single failing topics remain (their messages are
then isolated one by one). One bad topic among n costs about 2*log2(n) writes, where
sending each topic alone would cost n writes and a duplicate of every healthy topic.

A topic is blamed only on a failed write of its own: one that held it alone, or whose
error named it alone (`named`, once the others went through). When a group's left half
goes through, its right half only probably holds what failed: a timeout may have passed
since. So the right half is split without a write of its own, and its last single topic
is sent alone before it is blamed. That costs at most one write more than inferring the
blame, and a healthy topic is never put into backoff for its neighbours' failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from outbox_relay.stream.failures import refused_for_good

SendTopics = Callable[[Sequence[str]], str | None]  # topics -> failure reason or None


@dataclass
class TopicBisection:
    acknowledged: list[str] = field(default_factory=list)
    # Single topics whose write failed, with the reason: they go to message isolation.
    failing: dict[str, str] = field(default_factory=dict)
    # Topics left unresolved because Kafka is down, with the outage's reason.
    unavailable: dict[str, str] = field(default_factory=dict)
    # Topics whose lock was lost: dropped, never sent again in this batch.
    dropped: set[str] = field(default_factory=set)
    attempts: int = 0


def named_topics(text: str, topics: Iterable[str]) -> set[str]:
    """The topics a producer error names as `<topic>-<partition>` (e.g. "Expiring 3
    record(s) for orders-2" or "... in topic partition orders-0")."""
    return {
        t for t in topics
        if re.search(rf"(?<![\w.-]){re.escape(t)}-\d+(?![\w.-]|-)", text)
    }


def bisect_topics(
    topics: Sequence[str],
    first_reason: str,
    send: SendTopics,
    *,
    named: Collection[str] = (),
    outage: Callable[[str], str | None] = lambda reason: None,
    lost: Callable[[], Collection[str]] = frozenset,
) -> TopicBisection:
    """`topics` failed as one write with `first_reason`; find which of them fail.

    `named` are the topics the failure named: a hint only, so the others are re-sent in
    one write and acknowledged only if that write goes through. `outage(reason)` says
    whether a failure that sending again could cure means Kafka is down (then the rest
    stop and wait). `lost()` is the set of topics whose lock was lost: they are dropped
    as soon as they appear, and a group that lost one is sent again without them before
    anything is inferred from its failure (the failure may be the write's cancellation).
    """
    search = _Search(send, outage, lost)
    hint = [t for t in topics if t in set(named)]
    try:
        if hint and len(hint) < len(topics):
            others = [t for t in topics if t not in hint]
            failure = search.send(others)
            if failure is not None:
                search.resolve(others, failure)
                failure = search.send(hint)
                if failure is None:
                    return search.result
            search.resolve(hint, failure if failure is not None else first_reason)
        else:
            search.resolve(list(topics), first_reason)
    except _KafkaDown as down:
        done = {*search.result.acknowledged, *search.result.failing, *search.result.dropped}
        search.result.unavailable = {t: down.reason for t in topics if t not in done}
    return search.result


class _KafkaDown(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Search:
    def __init__(self, send: SendTopics, outage: Callable[[str], str | None],
                 lost: Callable[[], Collection[str]]) -> None:
        self._send, self._outage, self._lost = send, outage, lost
        self.result = TopicBisection()

    def _live(self, group: list[str]) -> list[str]:
        gone = set(self._lost()) & set(group)
        self.result.dropped |= gone
        return [t for t in group if t not in gone]

    def send(self, group: list[str]) -> str | None:
        """One write of `group`'s live topics: None when acknowledged (or nothing is
        left to send), else why it failed. Raises _KafkaDown on an outage."""
        while group := self._live(group):
            failure = self._send(group)
            self.result.attempts += 1
            if failure is None:
                self.result.acknowledged.extend(group)
                return None
            if set(self._lost()) & set(group):
                continue  # maybe only the cancellation of the lost topic's write
            if not refused_for_good(failure) and (down := self._outage(failure)) is not None:
                raise _KafkaDown(down)
            return failure
        return None

    def resolve(self, group: list[str], reason: str | None) -> None:
        """`group` failed with `reason`, or (None) is suspected of holding what failed:
        split it until single failing topics remain."""
        live = self._live(group)
        if len(live) < len(group) and reason is not None:
            failure = self.send(live)  # what failed may have been the lost topic alone
            if failure is None:
                return
            live, reason = self._live(live), failure
        if len(live) <= 1:
            if reason is None and live:
                reason = self.send(live)  # suspected only: tried alone before any blame
            if reason is not None:
                self.result.failing.update(dict.fromkeys(live, reason))
            return
        left, right = live[: len(live) // 2], live[len(live) // 2 :]
        dropped = len(self.result.dropped)
        failure = self.send(left)
        if failure is None and len(self.result.dropped) == dropped:
            # The left half went through whole, so the right half is suspected: its
            # halves are sent, not the whole of it, and no topic is blamed untried.
            self.resolve(right, None)
            return
        if failure is not None:
            self.resolve(left, failure)
        failure = self.send(right)
        if failure is not None:
            self.resolve(right, failure)
