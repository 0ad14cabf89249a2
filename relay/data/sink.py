"""The Kafka sink write, through Spark's own Kafka connector on the executors."""

from __future__ import annotations

from pyspark.sql import DataFrame

from relay.config import KafkaConfig


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


def write_records(records: DataFrame, kafka: KafkaConfig) -> None:
    """Send and wait: returns only after every record is acknowledged, else raises."""
    records.write.format("kafka").options(**producer_options(kafka)).save()
