"""The driver's Kafka producer: librdkafka's settings for the direct lane, the twin of the
Spark sink's Java ones (outbox_relay.data.sink.producer_options), from the same profile.

Idempotent, acks=all, at most 5 requests in flight, as the sink. One setting has no Java
twin and the direct lane's order rests on it: `enable.gapless.guarantee`. librdkafka,
like the Java client, may go on with later batches of a partition after one failed for
good, leaving a gap (a record refused, its successors appended); a record of that key
sent again later would then follow them. With the guarantee, such a failure stops the
producer instead (a fatal error), so what a partition holds of a write is a prefix of
what was produced to it (outbox_relay.direct.send keeps the rest to that rule).
It does not cover messages that fail by `message.timeout.ms`: that timeout is set past
the write's own deadline, which purges what is left instead.
"""

from __future__ import annotations

from typing import Any

from outbox_relay.config import KafkaConfig
from outbox_relay.observe.client_log import ClientLog
from outbox_relay.rules.partitioners import Partitioner

# librdkafka's partitioner for a record whose partition the relay did not set (a topic
# whose partition count is unknown): the one that hashes keys as the relay's partitioner.
_LIBRDKAFKA_PARTITIONER = {"murmur2": "murmur2_random", "crc32": "consistent_random"}
# message.timeout.ms past the write's deadline (outbox_relay.direct.send purges at it).
_TIMEOUT_MARGIN_MS = 60_000


def producer_config(kafka: KafkaConfig, partitioner: Partitioner) -> dict[str, Any]:
    """The producer's settings; the profile's `kafka.librdkafka_options` (TLS, SASL) on
    top, which may not touch these (outbox_relay.config.checks)."""
    return {
        "bootstrap.servers": kafka.bootstrap_servers,
        "acks": "all",
        "enable.idempotence": True,
        "max.in.flight.requests.per.connection": 5,
        "enable.gapless.guarantee": True,
        # librdkafka's own check of a record against the request size, as the Java
        # producer's max.request.size: the claim's allowance keeps every row below both.
        "message.max.bytes": kafka.max_request_size,
        "message.timeout.ms": kafka.delivery_timeout_ms + _TIMEOUT_MARGIN_MS,
        "request.timeout.ms": min(kafka.request_timeout_ms,
                                  kafka.delivery_timeout_ms - kafka.linger_ms),
        "linger.ms": kafka.linger_ms,
        "batch.size": kafka.batch_size,
        "compression.type": kafka.compression_type,
        "retry.backoff.ms": kafka.retry_backoff_ms,
        "queue.buffering.max.kbytes": kafka.buffer_memory // 1024,
        "partitioner": _LIBRDKAFKA_PARTITIONER[partitioner],
        # Through Python logging, as the admin client's (a connection the broker closes
        # while idle is no news).
        "logger": ClientLog(),
        "log.connection.close": False,
        **kafka.librdkafka_options,
    }
