"""The Spark plan of a batch's Kafka records, built once per session and reused.

Building and analysing it (the murmur2 expression most) took longer than writing a
1,000-row batch (bench/, W2); the read names no batch (relay.data.read), so one
analysed DataFrame sends every batch. It is built again only when a topic's partition
count is new or changed, since the counts are part of the plan.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from relay.config import Config
from relay.data.read import read_current_batch
from relay.data.records import in_key_order, to_kafka_records

IdRange = tuple[int, int]


class RecordPlan:
    def __init__(self, spark: SparkSession, config: Config, token: str) -> None:
        self._spark = spark
        self._config = config
        self._token = token
        self._counts: dict[str, int] = {}
        self._whole: DataFrame | None = None

    def records(self, counts: Mapping[str, int], topics: Collection[str] | None = None,
                ids: IdRange | None = None) -> DataFrame:
        """The records of this relay's current batch: all of them, or (bisection and
        isolation, whose plans serve one write) only those of `topics` with ids in `ids`."""
        if any(self._counts.get(t) != n for t, n in counts.items()):
            # Topics seen before stay in the map: a batch without them still reuses the plan.
            self._counts = {**self._counts, **counts}
            self._whole = None
        if topics is None and ids is None:
            if self._whole is None:
                self._whole = self._to_records(self._claimed())
            return self._whole
        claimed = self._claimed()
        if topics is not None:
            claimed = claimed.where(F.col("topic").isin(sorted(topics)))
        if ids is not None:
            claimed = claimed.where(F.col("id").between(ids[0], ids[1]))
        return self._to_records(claimed)

    def _claimed(self) -> DataFrame:
        cfg = self._config
        return read_current_batch(self._spark, cfg.postgres, self._token,
                                  cfg.relay.read_partitions)

    def _to_records(self, claimed: DataFrame) -> DataFrame:
        settings = self._config.relay
        return claimed.transform(in_key_order).transform(
            to_kafka_records,
            source_name=settings.source_name,
            header_prefix=settings.header_prefix,
            partitioner=settings.partitioner,
            partition_counts=self._counts,
        )
