"""Sends records with the driver's producer and says, per record, what became of it.

Every record gets its own delivery report, so a failed write knows which records failed
without a bisection. Three outcomes:

- acknowledged: Kafka has it (acks=all);
- refused: it is certainly not in Kafka. The broker refused it for good (it will refuse
  it again: `REFUSED_FOR_GOOD`), or it was never handed over (the producer refused it
  at once, or it was purged from the queue before it was sent);
- unknown: it may be in Kafka (a timeout, a request purged in flight, a fatal error of
  the producer): a retry may append it again, which is a duplicate, never a reordering.

What a partition holds of one write is a prefix of what was produced to it: the
producer's gap-less guarantee stops it at the first record refused for good
(outbox_relay.direct.producer), and a record the producer refuses at once ends the write
of its topic, so none produced after it to its partitions can be appended past it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Producer

from outbox_relay.direct.records import Record

log = logging.getLogger(__name__)

# Broker errors that the same record meets again: sending it again will not help. The
# topic's policy decides (block or park), as for the Spark lane's refused_for_good.
REFUSED_FOR_GOOD = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.POLICY_VIOLATION,
    KafkaError.INVALID_MSG, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.TOPIC_EXCEPTION,
    KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
})
# What a record's reason starts with when the producer's fatal error ended its write: the
# gap-less guarantee makes a broker's refusal fatal, and the culprit's report may then
# say only that (outbox_relay.stream.direct_lane isolates it).
STOPPED = "the producer stopped: "


def stopped(reason: str) -> bool:
    return reason.startswith(STOPPED)


# Never handed to Kafka: no copy of the record can be there.
NEVER_SENT = frozenset({KafkaError._PURGE_QUEUE})
_QUEUE_FULL_PAUSE_S = 0.05
# How long purged records take to come back with their reports.
_AFTER_PURGE_S = 5.0


@dataclass
class Sent:
    """What became of each record of a write, by outbox id."""

    acknowledged: set[int] = field(default_factory=set)
    refused: dict[int, str] = field(default_factory=dict)  # certainly not in Kafka
    unknown: dict[int, str] = field(default_factory=dict)  # may be in Kafka
    refused_for_good: set[int] = field(default_factory=set)  # of `refused`: poison
    fatal: str | None = None  # the producer's fatal error, if one ended it

    def failure(self, ids: Sequence[int]) -> str | None:
        """The reason among `ids` that says most: a refusal for good, else the producer's
        stop, else the first in id order (None: all acknowledged). A culprit's
        neighbours in other partitions may come first in id order, purged because of it."""
        if not self.refused and not self.unknown:
            return None
        first = stop = None
        for i in sorted(ids):
            if i in self.refused_for_good:
                return self.refused[i]
            reason = self.refused.get(i) or self.unknown.get(i)
            if reason is not None:
                first = first or reason
                stop = stop or (reason if stopped(reason) else None)
        return stop or first


def describe(err: KafkaError) -> str:
    return f"{err.str()} ({err.name()})"


@dataclass(frozen=True)
class Pending:
    """A write whose records are produced and whose reports are still coming."""

    producer: Producer
    ids: list[int]
    sent: Sent


class Sender:
    """One producer for a lane's direct writes; a new one after a fatal error."""

    def __init__(self, config: dict[str, Any],
                 new_producer: Callable[[dict[str, Any]], Producer] = Producer) -> None:
        self._config = config
        self._new = new_producer
        # Made at once: it connects to the brokers while the round locks and claims.
        self._producer: Producer | None = new_producer(config)

    def _get(self) -> Producer:
        if self._producer is None:
            self._producer = self._new(self._config)
        return self._producer

    def close(self, timeout_s: float = 5.0) -> None:
        if self._producer is not None:
            self._producer.flush(timeout_s)
            self._producer = None

    def send(self, records: Sequence[Record], timeout_s: float) -> Sent:
        """Produces `records` in order and waits for every report, at most `timeout_s`;
        what is left then is purged and counts as unknown (or refused, if never sent)."""
        return self.wait(self.start(records), timeout_s)

    def start(self, records: Sequence[Record]) -> Pending:
        """Produces `records` in order; the reports come while the caller does other work
        (reads the next write), and `wait` collects them."""
        sent = Sent()
        producer = self._get()
        produce = producer.produce
        stopped: set[str] = set()  # topics whose write ended at a record refused at once
        for r in records:
            if stopped and r.topic in stopped:
                sent.refused[r.id] = f"not sent: an earlier record of topic {r.topic} was refused"
                continue
            try:  # the common case inline: MANY's rows share one interpreter
                produce(r.topic, value=r.value, key=r.key,
                        headers=cast("list[tuple[str, str | bytes | None]]", r.headers),
                        partition=-1 if r.partition is None else r.partition,
                        on_delivery=functools.partial(_on_delivery, sent, r.id))
            except (BufferError, KafkaException):
                if not self._produce(producer, r, sent):
                    stopped.add(r.topic)
        return Pending(producer, [r.id for r in records], sent)

    def wait(self, pending: Pending, timeout_s: float) -> Sent:
        """Every report of a started write, waited for at most `timeout_s`."""
        sent = pending.sent
        self._wait(pending.producer, time.monotonic() + timeout_s, sent)
        # Each id once in a write: all acknowledged, or some without a report at all (the
        # producer died), which may be in Kafka.
        for i in pending.ids if len(sent.acknowledged) < len(pending.ids) else ():
            if i not in sent.acknowledged and i not in sent.refused and i not in sent.unknown:
                sent.unknown[i] = STOPPED + sent.fatal if sent.fatal else "no delivery report"
        if sent.fatal is not None and self._producer is pending.producer:
            log.warning("the direct lane's producer stopped (%s): a new one takes the next "
                        "write", sent.fatal)
            self._producer = None
        return sent

    def _produce(self, producer: Producer, r: Record, sent: Sent) -> bool:
        report = functools.partial(_on_delivery, sent, r.id)
        while True:
            try:
                producer.produce(r.topic, value=r.value, key=r.key,
                                 headers=cast("list[tuple[str, str | bytes | None]]", r.headers),
                                 partition=-1 if r.partition is None else r.partition,
                                 on_delivery=report)
                return True
            except BufferError:  # the local queue is full: let reports drain it
                producer.poll(_QUEUE_FULL_PAUSE_S)
            except KafkaException as exc:
                err = exc.args[0]
                _refuse(sent, r.id, err)
                return False

    def _wait(self, producer: Producer, deadline: float, sent: Sent) -> None:
        try:
            left = producer.flush(max(0.0, deadline - time.monotonic()))
            if left:
                log.warning("the direct write timed out with %d record(s) unacknowledged: "
                            "purging them", left)
                producer.purge(in_queue=True, in_flight=True)
                producer.flush(_AFTER_PURGE_S)
        except (KafkaException, SystemError) as exc:
            # A fatal error (the gap-less guarantee's) surfaces here in confluent-kafka;
            # every record without a report then counts as unknown (see the caller).
            sent.fatal = sent.fatal or _fatal_text(exc)


def _refuse(sent: Sent, outbox_id: int, err: KafkaError) -> None:
    sent.refused[outbox_id] = describe(err)
    if err.code() in REFUSED_FOR_GOOD:
        sent.refused_for_good.add(outbox_id)


def _on_delivery(sent: Sent, outbox_id: int, err: KafkaError | None, _msg: object) -> None:
    if err is None:
        sent.acknowledged.add(outbox_id)
        return
    try:
        _report(sent, outbox_id, err)
    except SystemError as exc:
        # confluent-kafka calls the first report after the producer's fatal error with
        # that error still pending: the first call into it raises a SystemError caused by
        # the fatal error, and the calls after it work.
        sent.fatal = sent.fatal or _fatal_text(exc)
        _report(sent, outbox_id, err)


def _report(sent: Sent, outbox_id: int, err: KafkaError | None) -> None:
    if err is None:
        sent.acknowledged.add(outbox_id)
        return
    code = err.code()
    if code in REFUSED_FOR_GOOD or code in NEVER_SENT:
        _refuse(sent, outbox_id, err)
    else:
        sent.unknown[outbox_id] = (STOPPED if err.fatal() else "") + describe(err)
    if err.fatal():
        sent.fatal = sent.fatal or describe(err)


def _fatal_text(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, KafkaException) and isinstance(cause.args[0], KafkaError):
        return describe(cause.args[0])
    return f"fatal error: {cause or exc}"
