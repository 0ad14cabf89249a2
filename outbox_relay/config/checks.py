"""Value rules of the configuration, each one line of error naming what is wrong.

pydantic validators in outbox_relay.config call these; they know nothing of the models.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

# Producer settings the relay's guarantees rest on (sink.producer_options sets them).
# Kafka's names are case-sensitive, but Spark lower-cases its `kafka.` options.
GUARANTEED_JAVA_OPTIONS = frozenset(
    {"acks", "enable.idempotence", "max.in.flight.requests.per.connection"}
)
# Producer settings the relay derives from its own: an override would leave the driver
# checking against one value while the producer uses another (the size check reads the
# codec and max.request.size), so each has one place, the setting named here.
OWNED_JAVA_OPTIONS = {
    "bootstrap.servers": "kafka.bootstrap_servers",
    "max.request.size": "kafka.max_request_size",
    "compression.type": "kafka.compression_type",
    "delivery.timeout.ms": "kafka.delivery_timeout_ms",
    "max.block.ms": "kafka.delivery_timeout_ms",
    "request.timeout.ms": "kafka.request_timeout_ms",
    "linger.ms": "kafka.linger_ms",
    "batch.size": "kafka.batch_size",
    "retry.backoff.ms": "kafka.retry_backoff_ms",
    "buffer.memory": "kafka.buffer_memory",
}


def java_option_name(key: str) -> str:
    """The producer setting a java_options key reaches, as Spark's sink passes it on."""
    name = key.strip().lower()
    return name.removeprefix("kafka.")


# The same for the driver's producer (outbox_relay.direct.producer), in librdkafka's names
# and their aliases.
GUARANTEED_LIBRDKAFKA_OPTIONS = frozenset({
    "acks", "request.required.acks", "enable.idempotence",
    "max.in.flight.requests.per.connection", "max.in.flight", "enable.gapless.guarantee",
    "partitioner", "partitioner_cb",
})
OWNED_LIBRDKAFKA_OPTIONS = {
    "bootstrap.servers": "kafka.bootstrap_servers",
    "metadata.broker.list": "kafka.bootstrap_servers",
    "message.max.bytes": "kafka.max_request_size",
    "compression.type": "kafka.compression_type",
    "compression.codec": "kafka.compression_type",
    "message.timeout.ms": "kafka.delivery_timeout_ms",
    "delivery.timeout.ms": "kafka.delivery_timeout_ms",
    "request.timeout.ms": "kafka.request_timeout_ms",
    "linger.ms": "kafka.linger_ms",
    "queue.buffering.max.ms": "kafka.linger_ms",
    "batch.size": "kafka.batch_size",
    "retry.backoff.ms": "kafka.retry_backoff_ms",
    "queue.buffering.max.kbytes": "kafka.buffer_memory",
}


def keep_librdkafka_guarantees(options: dict[str, str]) -> dict[str, str]:
    for key in options:
        name = key.strip()
        if name in GUARANTEED_LIBRDKAFKA_OPTIONS:
            raise ValueError(f"kafka.librdkafka_options.{key}: the relay sets {name} itself "
                             "for its delivery guarantees (per-key order, no duplicates on "
                             "retry); remove it")
        if name in OWNED_LIBRDKAFKA_OPTIONS:
            raise ValueError(f"kafka.librdkafka_options.{key}: set "
                             f"{OWNED_LIBRDKAFKA_OPTIONS[name]} instead (the relay derives "
                             f"{name} from it)")
    return options


def keep_delivery_guarantees(options: dict[str, str]) -> dict[str, str]:
    for key in options:
        name = java_option_name(key)
        if name in GUARANTEED_JAVA_OPTIONS:
            raise ValueError(f"kafka.java_options.{key}: the relay sets {name} itself for "
                             "its delivery guarantees (per-key order, no duplicates on "
                             "retry); remove it")
        if name in OWNED_JAVA_OPTIONS:
            raise ValueError(f"kafka.java_options.{key}: set {OWNED_JAVA_OPTIONS[name]} "
                             f"instead (the relay derives {name} from it)")
    return options


def check_lock_timeouts(lock_s: float, beat_s: float, statement_ms: int,
                        idle_ms: int) -> None:
    """The heartbeat must renew a lock before it lapses, by the database's clock, and a
    lapsed lock must be free to take by then.

    A third of the lock timeout between renewals lets a lock survive two missed
    renewals; a renewal that hangs is cut off by the statement timeout and retried
    one interval later, still before the lock lapses. A relay paused inside its delete's
    transaction holds its topics' rows (HOLD_OWNED) until the server ends that idle
    transaction: past the lock timeout, a rival would wait longer than the lock promises.
    """
    if beat_s * 3 > lock_s:
        raise ValueError(
            f"relay.heartbeat_interval_s: {beat_s:g} s must be at most a third of "
            f"relay.lock_timeout_s ({lock_s:g} s), so a lock survives two missed renewals"
        )
    if statement_ms / 1000 + beat_s >= lock_s:
        raise ValueError(
            f"postgres.statement_timeout_ms: {statement_ms} ms plus "
            f"relay.heartbeat_interval_s ({beat_s:g} s) must stay below "
            f"relay.lock_timeout_s ({lock_s:g} s), so a renewal that hangs is cut off "
            "and retried before the lock lapses"
        )
    if not 0 < idle_ms < lock_s * 1000:
        raise ValueError(
            f"postgres.idle_in_transaction_timeout_ms: {idle_ms} ms must be above 0 and "
            f"below relay.lock_timeout_s ({lock_s:g} s): a relay paused inside its delete's "
            "transaction holds its topics until the server ends that transaction, so a "
            "rival could not take a lapsed lock over"
        )


def at_most_bytes(value: str, limit: int) -> str:
    if len(value.encode()) > limit:
        raise ValueError(f"must be at most {limit} bytes in UTF-8")
    return value


def check_postgres_url(value: str) -> str:
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - urllib checks the port only when asked for it
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("must look like postgresql://user@host:port/database")
    return value


def check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from exc
    return value


def resolve_env_ref(key: str, value: str) -> str:
    if not value.startswith("env:"):
        return value
    name = value[4:]
    if name not in os.environ:
        raise ValueError(f"{key} names environment variable {name}, which is not set")
    return os.environ[name]


# What `transform = "package.module:function"` may look like: dotted identifiers, a colon,
# one identifier. Importing it is the relay's start-up check (outbox_relay.app.preflight).
_TRANSFORM_SPEC = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def check_transform_spec(value: str) -> str:
    if not _TRANSFORM_SPEC.fullmatch(value):
        raise ValueError(f"{value!r} is not of the form package.module:function")
    return value


def check_event_type(event_type: str | None, cloudevents: bool) -> str | None:
    """A rule's default ce_type: a non-empty string, on a CloudEvents topic only."""
    if event_type is None:
        return None
    if not cloudevents:
        raise ValueError("a default ce_type needs cloudevents = true in the same rule")
    if not event_type.strip():
        raise ValueError("must be a non-empty string")
    return event_type
