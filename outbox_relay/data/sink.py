"""The Kafka sink write, through Spark's own Kafka connector on the executors."""

from __future__ import annotations

from pyspark.sql import DataFrame

from outbox_relay.config import KafkaConfig


def producer_options(kafka: KafkaConfig) -> dict[str, str]:
    """Java-client options for Spark's sink: idempotent, acks=all, ordered retries."""
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "kafka.acks": "all",
        "kafka.enable.idempotence": "true",
        "kafka.max.in.flight.requests.per.connection": "5",
        "kafka.max.request.size": str(kafka.max_request_size),
        "kafka.delivery.timeout.ms": str(kafka.delivery_timeout_ms),
        "kafka.request.timeout.ms": str(
            min(kafka.request_timeout_ms, kafka.delivery_timeout_ms - kafka.linger_ms)
        ),
        "kafka.linger.ms": str(kafka.linger_ms),
        "kafka.batch.size": str(kafka.batch_size),
        "kafka.compression.type": kafka.compression_type,
        "kafka.max.block.ms": str(kafka.delivery_timeout_ms),
        "kafka.retry.backoff.ms": str(kafka.retry_backoff_ms),
        "kafka.buffer.memory": str(kafka.buffer_memory),
    }
    options.update({f"kafka.{k}": v for k, v in kafka.java_options.items()})
    return options


# The least batch.size a write adapts down to: Kafka's own default.
MIN_BATCH_BYTES = 16_384


def batching_for(kafka: KafkaConfig, partitions: int) -> KafkaConfig:
    """`kafka` with a batch.size that fits a write to `partitions` partitions.

    The Java producer takes a whole batch.size from its buffer pool for every partition
    it holds an open batch for. At the profile's 256 KB, a write to 1,000 topics of one
    partition asked for the whole 256 MiB pool and waited on it: 1,799 msg/s where the peer
    sent 9,998 (bench/, W3 on the shipped profile). So a write whose partitions would take
    more than a quarter of the pool gets batches a quarter the size, down to Kafka's
    default; a few sizes at most, since Spark keeps a producer per set of options.
    """
    size = kafka.batch_size
    while size > MIN_BATCH_BYTES and partitions * size > kafka.buffer_memory // 4:
        size = max(MIN_BATCH_BYTES, size // 4)
    return kafka if size == kafka.batch_size else kafka.model_copy(update={"batch_size": size})


def write_records(records: DataFrame, kafka: KafkaConfig) -> None:
    """Send and wait: returns only after every record is acknowledged, else raises."""
    records.write.format("kafka").options(**producer_options(kafka)).save()
