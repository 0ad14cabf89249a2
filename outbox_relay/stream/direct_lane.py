"""The sessions a batch gives the driver's producer (outbox_relay.direct), sent in writes
of at most `relay.direct_max_rows` rows and `relay.direct_max_bytes` bytes, with what
failed known per record from its delivery report.

A write's rows are read on the driver, made into the Spark lane's records byte for
byte, and sent in id order. A topic whose records were all acknowledged is done. A
record refused for good was refused with its produce batch (the broker refuses batches,
so its healthy neighbours share the report): the topic's unacknowledged records are
isolated as the Spark lane isolates, each try a direct write of a range of them. Any
other failure (a timeout, a record purged in flight, an unknown topic) backs the topic
off, Kafka's outage or not, with what was acknowledged kept: per partition that is a
prefix of the write (outbox_relay.direct.send), so no key's order depends on the rest.
Once Kafka is found down, the batch's writes not made yet back their topics off too:
each would only wait out its own deadline.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from outbox_relay.config import Config
from outbox_relay.control.claims import Claim
from outbox_relay.control.db import Database
from outbox_relay.control.kafka_admin import KafkaAdmin
from outbox_relay.direct.read import read_batch
from outbox_relay.direct.records import Record, to_records
from outbox_relay.direct.send import Sender, Sent, stopped
from outbox_relay.rules.partitioners import Partitioner
from outbox_relay.stream.failures import failure_kind, refused_for_good
from outbox_relay.stream.isolate import Isolation, isolate
from outbox_relay.stream.settle import Outcome, Settlement, outage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DirectSettings:
    """What the direct lane reads of the profile."""

    source_name: str
    header_prefix: str
    partitioner: Partitioner
    timeout_s: float
    max_rows: int
    max_bytes: int
    # Backlogs too (relay.backlog_lane, resolved): every claim is capped at a write's
    # limits, Spark up or not, and none is handed to the executors for its size.
    backlogs: bool = False

    @classmethod
    def of(cls, config: Config, *, backlogs: bool = False) -> DirectSettings:
        relay, kafka = config.relay, config.kafka
        return cls(relay.source_name, relay.header_prefix, relay.partitioner,
                   kafka.delivery_timeout_ms / 1000, relay.direct_max_rows,
                   relay.direct_max_bytes, backlogs)

    def fits(self, claim: Claim) -> bool:
        """Whether a topic's claim is small enough for the driver: larger ones are Spark
        jobs, whose cost hardly depends on their rows."""
        return claim.rows <= self.max_rows and claim.bytes <= self.max_bytes

    def writes(self, sessions: Sequence[Claim]) -> list[list[Claim]]:
        """`sessions` packed, in order, into writes of at most `max_rows` rows and
        `max_bytes` bytes: what the driver holds at once. Many topics of a few rows each
        share a write (1,000 topics of 100 rows in 20 writes, not in 1,000)."""
        writes: list[list[Claim]] = []
        rows = size = 0
        for claim in sessions:
            if not writes or (rows + claim.rows > self.max_rows
                              or size + claim.bytes > self.max_bytes):
                writes.append([])
                rows = size = 0
            writes[-1].append(claim)
            rows, size = rows + claim.rows, size + claim.bytes
        return writes


class DirectLane:
    """`cloudevents()` maps each CloudEvents topic to its rule's default type;
    `lost()` names the topics whose lock the heartbeat found lost in this batch."""

    def __init__(self, sender: Sender, settings: DirectSettings, *, db: Database,
                 admin: KafkaAdmin, settlement: Settlement,
                 cloudevents: Callable[[Collection[str]], Mapping[str, str | None]],
                 lost: Callable[[], Collection[str]]) -> None:
        self._sender = sender
        self._settings = settings
        self._db = db
        self._admin = admin
        self._settlement = settlement
        self._cloudevents = cloudevents
        self._lost = lost

    @property
    def settings(self) -> DirectSettings:
        return self._settings

    def close(self) -> None:
        self._sender.close()

    def deliver(self, batch_id: int, sessions: list[Claim]) -> Outcome:
        """The batch's writes, one after the other; each next write is read while the
        one before it is in flight (W3: 0.25 s a write of 5,000 rows one after the
        other, of which the read took 0.09 s), so the driver holds two at most."""
        outcome = Outcome()
        writes = self._settings.writes(sessions)
        following = self._read(batch_id, writes[0]) if writes else None
        down: str | None = None
        for n, part in enumerate(writes):
            if down is not None:
                outcome.errors.update((c.topic, down) for c in part)
                continue
            assert following is not None
            topics, records = following
            pending = self._sender.start(records)
            following = self._read(batch_id, writes[n + 1]) if n + 1 < len(writes) else None
            sent = self._sender.wait(pending, self._settings.timeout_s)
            self._settle(part, topics, records, sent, outcome)
            down = next((r for r in outcome.errors.values() if failure_kind(r) == "outage"),
                        None)
        outcome.lanes.update((c.topic, "direct") for c in outcome.acknowledged)
        return outcome

    def _read(self, batch_id: int, sessions: list[Claim]) -> tuple[set[str], list[Record]]:
        """The records of `sessions` whose topic is still ours."""
        topics = sorted(c.topic for c in sessions if c.topic not in self._lost())
        s = self._settings
        records = to_records(read_batch(self._db, batch_id, topics), source_name=s.source_name,
                             header_prefix=s.header_prefix, partitioner=s.partitioner,
                             cloudevents=self._cloudevents(topics))
        return set(topics), records

    def _settle(self, sessions: list[Claim], topics: set[str], records: list[Record],
                sent: Sent, outcome: Outcome) -> None:
        by_topic: dict[str, list[Record]] = defaultdict(list)
        for r in records:
            by_topic[r.topic].append(r)
        for claim in sessions:
            mine = by_topic.get(claim.topic, [])
            if claim.topic not in topics or not mine:
                continue  # lost: the new owner has it
            failure = sent.failure([r.id for r in mine])
            if failure is None:
                outcome.acknowledged.append(claim)
            else:
                self._settlement.settle(claim, self._found(claim, mine, sent, failure),
                                        outcome)

    def _send(self, records: list[Record]) -> Sent:
        return self._sender.send(records, self._settings.timeout_s)

    def _found(self, claim: Claim, mine: list[Record], sent: Sent, failure: str) -> Isolation:
        """What failed in `claim`'s records: isolated when a record was refused for good,
        else the acknowledged part kept and the topic backed off."""
        acked = sorted(r.id for r in mine if r.id in sent.acknowledged)
        pending = [r for r in mine if r.id not in sent.acknowledged]
        refused = [r.id for r in pending if r.id in sent.refused_for_good]
        down = None if refused else outage(self._admin, failure)
        # A producer stopped by a fatal error (the gap-less guarantee makes a broker's
        # refusal fatal) may report its culprit only as stopped, and the rest as purged:
        # unless Kafka is down, isolation finds the culprit, as the Spark lane's does, so
        # that a refusal for good frees what the session withholds behind it.
        if not refused and (sent.fatal is None or down is not None):
            log.warning("topic %s: %d of %d record(s) not acknowledged: %s", claim.topic,
                        len(pending), len(mine), down or failure)
            return Isolation(delivered=acked, reason=down or failure, attempts=1)
        by_id = {r.id: r for r in pending}

        def resend(first: int, last: int) -> str | None:
            part = [r for i, r in by_id.items() if first <= i <= last]
            return self._send(part).failure([r.id for r in part])

        # The refusal's own words start the isolation: the first report of a write the
        # producer stopped may say only that it stopped.
        reason = sent.refused[refused[0]] if refused else failure
        result = isolate(sorted(by_id), reason, resend,
                         lambda why: refused_for_good(why) or stopped(why))
        result.delivered = acked + result.delivered
        return result
