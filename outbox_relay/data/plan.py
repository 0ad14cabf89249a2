"""The Spark plan of a batch's Kafka records, built once per session and reused.

Building and analysing it (the murmur2 expression most) took longer than writing a
1,000-row batch (reports/performance-history.md, W2); the read names no batch
(outbox_relay.data.read), and each row brings its topic's partition count
(outbox_relay/schemas/0014), so one analysed DataFrame sends every batch, whatever its topics.
Topics whose rule names a transform go through outbox_relay.data.transform, in branches of their
own, filtered by topic; a CloudEvents topic's records get the attributes of
outbox_relay.rules.cloudevents. A transformed or CloudEvents topic new to the session is the one
thing that builds the plans again.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outbox_relay.config import Config, TopicRule
from outbox_relay.data.read import read_current_batch
from outbox_relay.data.records import CloudEventTopics, in_key_order, to_kafka_records
from outbox_relay.data.transform import RowCounter, checked_records, load_transform, transform_input
from outbox_relay.errors import ConfigError
from outbox_relay.rules.topic_rules import rule_for

IdRange = tuple[int, int]
# A batch of at most this many rows is read by one task. Each task of a write opens its
# own JDBC connection and takes a producer: on two cores a write of no rows cost 214 ms
# of the driver JVM's CPU with two read tasks and 113 ms with one, and a relay under
# 500 msg/s writes several small batches a second. A bigger batch is split
# (`relay.read_partitions`) so that its tasks read and send in parallel.
ONE_TASK_ROWS = 10_000


class RecordPlan:
    def __init__(self, spark: SparkSession, config: Config, token: str) -> None:
        self._spark = spark
        self._config = config
        self._token = token
        # The transformed topics seen this session: the plain branch's filter names them.
        self._seen_transformed: set[str] = set()
        # Whole-batch plans by (plain topics present, transforms present).
        self._plans: dict[tuple[bool, frozenset[str], int], DataFrame] = {}
        self._counter: RowCounter | None = None
        # The CloudEvents topics seen this session, with their default type: the records'
        # headers name them (outbox_relay.data.records.cloudevent_headers).
        self._seen_cloudevents: dict[str, str | None] = {}
        # The rules never change in a session; every write asks for each of its topics.
        self._rule_of: dict[str, TopicRule] = {}
        # Whole plans without a transform, planned once: id(plan) -> (plan, its RDD).
        self._planned: dict[int, tuple[DataFrame, Any]] = {}

    def twin(self, suffix: str) -> RecordPlan:
        """The same plan for the token `token + suffix`."""
        return RecordPlan(self._spark, self._config, f"{self._token}{suffix}")

    def rule_of(self, topic: str) -> TopicRule:
        if topic not in self._rule_of:
            self._rule_of[topic] = rule_for(self._config.relay.topic_rules, topic)
        return self._rule_of[topic]

    def transform_of(self, topic: str) -> str | None:
        return self.rule_of(topic).transform

    @property
    def cloudevent_topics(self) -> CloudEventTopics:
        return tuple(sorted(self._seen_cloudevents.items()))

    def _note_cloudevents(self, topics: Collection[str]) -> bool:
        """Whether `topics` hold a CloudEvents topic new to the session (noted now)."""
        new = {t: self.rule_of(t).event_type for t in topics
               if self.rule_of(t).cloudevents and t not in self._seen_cloudevents}
        self._seen_cloudevents.update(new)
        return bool(new)

    def partitions_for(self, rows: int | None) -> int:
        """Read tasks for a batch of `rows` rows (None: not known, the profile's split)."""
        small = rows is not None and rows <= ONE_TASK_ROWS
        return 1 if small else self._config.relay.read_partitions

    def records(self, topics: Collection[str], ids: IdRange | None = None, *,
                whole: bool = True, rows: int | None = None) -> DataFrame:
        """The records of this relay's current batch, whose topics are `topics`: all of
        them (`whole`), or (bisection and isolation, whose plans serve one write) only
        those of `topics`, with ids in `ids` when given. `rows`, the rows claimed, picks
        the read's split (partitions_for).

        A batch without a transformed topic gets the plan it always had: no second read,
        no sort, no Python worker. With one, each transform has a branch of its own, read
        by a JDBC query of its own that PostgreSQL filters by topic, so every row crosses
        the wire once (docs/configuration.md, "Transforms")."""
        new = {t for t in topics if self.transform_of(t) is not None} - self._seen_transformed
        # Either kind, once seen, stays: a batch without them still reuses the plan.
        if self._note_cloudevents(topics) or new:
            self._seen_transformed |= new
            self._plans.clear()
        specs = frozenset(s for t in topics if (s := self.transform_of(t)) is not None)
        plain = any(self.transform_of(t) is None for t in topics) or not specs
        partitions = self.partitions_for(rows)
        if whole and ids is None:
            key = (plain, specs, partitions)
            if key not in self._plans:
                self._plans[key] = self._build(self._claimed(partitions), plain, specs)
            return self._plans[key]
        claimed = self._claimed(partitions)
        if not whole:
            claimed = claimed.where(F.col("topic").isin(sorted(topics)))
        if ids is not None:
            claimed = claimed.where(F.col("id").between(ids[0], ids[1]))
        return self._build(claimed, plain, specs)

    @property
    def counter(self) -> RowCounter:
        if self._counter is None:
            self._counter = RowCounter(self._spark)
        return self._counter

    def _build(self, claimed: DataFrame, plain: bool, specs: frozenset[str]) -> DataFrame:
        if not specs:
            return self._to_records(claimed)
        by_spec: dict[str, list[str]] = {}
        for topic in sorted(self._seen_transformed):
            if (spec := self.transform_of(topic)) is not None:
                by_spec.setdefault(spec, []).append(topic)
        transformed = sorted(t for ts in by_spec.values() for t in ts)
        parts = [self._transformed(claimed.where(F.col("topic").isin(by_spec[s])), s)
                 for s in sorted(specs)]
        if plain:
            parts.insert(0, self._to_records(claimed.where(~F.col("topic").isin(transformed))))
        return functools.reduce(DataFrame.union, parts)

    def executable(self, records: DataFrame) -> DataFrame:
        """`records` to write. A whole plan without a transform is optimized and planned
        once: its RDD reads the current batch afresh at each run (JDBC queries run per
        job), so later writes skip Catalyst, which cost the driver about 100 ms of CPU a
        write (several writes a second at a trickle). Anything else is planned by its
        write, as Spark does; so is every plan where Spark's internals are out of reach."""
        if not any(records is plan for (_, specs, _), plan in self._plans.items()
                   if not specs):
            return records
        planned = self._planned.get(id(records))
        try:
            if planned is None or planned[0] is not records:
                rdd = records._jdf.queryExecution().toRdd()
                planned = self._planned[id(records)] = (records, rdd)
            session = self._spark._jsparkSession
            jdf = session.internalCreateDataFrame(planned[1], records._jdf.schema(), False)
        except Exception:  # e.g. a Spark Connect session: no JVM objects to reach
            return records
        return DataFrame(jdf, self._spark)

    def _claimed(self, partitions: int) -> DataFrame:
        cfg = self._config
        return read_current_batch(self._spark, cfg.postgres, self._token, partitions)

    def _to_records(self, claimed: DataFrame) -> DataFrame:
        settings = self._config.relay
        return claimed.transform(in_key_order).transform(
            to_kafka_records,
            source_name=settings.source_name,
            header_prefix=settings.header_prefix,
            partitioner=settings.partitioner,
            cloudevents=self.cloudevent_topics,
        )

    def _transformed(self, claimed: DataFrame, spec: str) -> DataFrame:
        settings = self._config.relay
        given = claimed.transform(in_key_order).transform(
            transform_input, partitioner=settings.partitioner)
        out = load_transform(spec)(given)
        if not isinstance(out, DataFrame):
            raise ConfigError(f"transform {spec} returned {type(out).__name__}, "
                                 "not a DataFrame")
        return checked_records(out, spec=spec, expected=given.schema,
                               source_name=settings.source_name,
                               header_prefix=settings.header_prefix, counter=self.counter,
                               cloudevents=self.cloudevent_topics)
