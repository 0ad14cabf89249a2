"""Finds the one message Kafka refuses inside a failed send, with few re-sends.

Bisection over the session's ids in id order: a prefix that goes through is delivered
(and later deleted), a prefix that fails holds the culprit. n messages cost about
log2(n) re-sends. Every send that goes through lies wholly before the culprit, so what is
delivered is a prefix in id order; a failing send may hold messages after the culprit,
which the broker refused with it (they stay, and go again after the culprit is settled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from outbox_relay.stream.failures import refused_for_good


@dataclass
class Isolation:
    delivered: list[int] = field(default_factory=list)
    culprit: int | None = None
    reason: str = ""
    attempts: int = 0

    @property
    def poison(self) -> bool:
        """The culprit was refused for good (not an outage)."""
        return self.culprit is not None and refused_for_good(self.reason)


Send = Callable[[int, int], str | None]  # (first id, last id) -> failure reason or None


def isolate(ids: Sequence[int], first_reason: str, send: Send,
            narrows: Callable[[str], bool] = refused_for_good) -> Isolation:
    """`ids` failed as a whole with `first_reason`; narrow it down to one message while
    the failure is one that `narrows` (a refusal for good, unless told otherwise).

    Stops early on an outage-like failure: bisecting during an outage only re-sends.
    """
    result = Isolation(reason=first_reason, attempts=1)
    lo, hi = 0, len(ids) - 1
    narrowed = False
    while lo < hi:
        if not narrows(result.reason):
            return result
        mid = (lo + hi) // 2
        failure = send(ids[lo], ids[mid])
        result.attempts += 1
        if failure is None:
            result.delivered.extend(ids[lo : mid + 1])
            lo = mid + 1
        else:
            result.reason = failure
            narrowed = lo == mid
            hi = mid
    if not ids:
        return result
    if len(ids) > 1 and not narrowed and narrows(result.reason):
        # The last failure covered neighbours too, whose errors only echo the culprit's;
        # one send of the culprit alone confirms it and gives its own reason.
        own = send(ids[lo], ids[lo])
        result.attempts += 1
        if own is None:
            result.delivered.append(ids[lo])
            result.reason = "the failure did not repeat when sent alone"
            return result
        result.reason = own
    result.culprit = ids[lo]
    return result
