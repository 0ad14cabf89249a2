"""The driver's size check agrees with Kafka's at the boundary, reserved headers included.

The largest message the relay lets through must be accepted by the real broker under the
configured codec, with incompressible bytes (compression can only add framing then), the
longest source name and header prefix the config allows, and the topic's own limit; one
byte more must be caught before sending, so it never reaches the broker to be refused
there (a refusal after later batches of its partition went through can reorder its key).
"""

from __future__ import annotations

import random

import pytest

from outbox_relay.config import MAX_HEADER_PREFIX_BYTES, MAX_SOURCE_NAME_BYTES
from outbox_relay.rules.record_size import payload_allowance
from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_LEFT_OVER
from tests.integration.conftest import ConfigFactory, RelayRunner
from tests.integration.helpers import Msg, consume, create_topics, insert, query, unique

pytestmark = pytest.mark.integration

SOURCE = "s" * MAX_SOURCE_NAME_BYTES
PREFIX = "p" * (MAX_HEADER_PREFIX_BYTES - 1) + "."
KEY = b"k"

# (codec, the topic's max.message.bytes, the producer's max.request.size): the first four
# are bound by the broker's limit on the compressed batch, the last by the producer's own.
CASES = [
    ("lz4", 50_000, 1_048_576),
    ("zstd", 50_000, 1_048_576),
    ("snappy", 50_000, 1_048_576),
    ("gzip", 50_000, 1_048_576),
    ("none", 2_000_000, 100_000),
]


@pytest.mark.parametrize(("codec", "topic_limit", "request_limit"), CASES)
def test_the_largest_accepted_message_is_delivered_and_one_byte_more_is_caught(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    codec: str, topic_limit: int, request_limit: int,
) -> None:
    topic = unique(f"size-{codec}")
    create_topics(stack.kafka_bootstrap, {topic: 1}, **{"max.message.bytes": str(topic_limit)})
    allowance = payload_allowance(topic_limit, request_limit, codec, PREFIX, SOURCE)
    # The claim counts message + key (+ user headers as JSON text) against the allowance.
    rng = random.Random(topic_limit + request_limit)
    fits = rng.randbytes(allowance - len(KEY))
    too_big = rng.randbytes(allowance - len(KEY) + 1)
    fit_id, big_id = insert(migrated_url, [[Msg(topic, KEY, fits)], [Msg(topic, KEY, too_big)]])
    config = make_config(
        [topic],
        kafka={"compression_type": codec, "max_request_size": request_limit},
        relay={"source_name": SOURCE, "header_prefix": PREFIX, "available_now_deadline_s": 2},
    )

    result = run_relay(config)

    got = consume(stack.kafka_bootstrap, [topic], expect=1)
    assert [int(r.headers[PREFIX + "id"]) for r in got] == [fit_id], \
        f"the boundary message must be accepted by the broker: {result.stats.errors}"
    assert got[0].value == fits and got[0].headers[PREFIX + "source"] == SOURCE.encode()
    assert result.exit_code == EXIT_LEFT_OVER
    error, last_error = query(migrated_url, "SELECT error, last_error FROM kafka_topic_info "
                              "WHERE topic = %s", (topic,))[0]
    assert error and last_error.startswith(f"message {big_id}: ") and "over the limit" in \
        last_error, f"one byte more must be caught before sending, got: {last_error}"
    left = query(migrated_url, "SELECT id FROM kafka_messages")
    assert left == [(big_id,)]
