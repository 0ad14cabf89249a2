"""The producer's batch.size adapts to the partitions one write spans (outbox_relay.data.sink)."""

from __future__ import annotations

from outbox_relay.config import KafkaConfig
from outbox_relay.data.sink import MIN_BATCH_BYTES, batching_for, producer_options

KAFKA = KafkaConfig(bootstrap_servers="127.0.0.1:9092")  # 256 KB batches, a 256 MiB pool


def test_a_write_to_few_partitions_keeps_the_profiles_batches() -> None:
    assert batching_for(KAFKA, 30) is KAFKA
    assert batching_for(KAFKA, 256) is KAFKA  # 64 MiB: a quarter of the pool, not more


def test_a_write_to_a_thousand_partitions_takes_at_most_a_quarter_of_the_pool() -> None:
    adapted = batching_for(KAFKA, 1000)
    assert adapted.batch_size == 65_536
    assert 1000 * adapted.batch_size <= KAFKA.buffer_memory // 4
    assert producer_options(adapted)["kafka.batch.size"] == "65536"
    assert adapted.model_copy(update={"batch_size": KAFKA.batch_size}) == KAFKA


def test_batches_never_shrink_below_kafkas_default_and_take_few_sizes() -> None:
    sizes = {batching_for(KAFKA, n).batch_size for n in range(1, 200_000, 97)}
    assert min(sizes) == MIN_BATCH_BYTES
    assert sizes <= {262_144, 65_536, 16_384}
