"""The pytest plugin of outbox-relay (entry point `outbox_relay` in the pytest11 group):
installing outbox-relay gives every test the `outbox` fixture.

    def test_checkout(conn, outbox):
        checkout(conn, order_id=42)   # the application's code, in conn's transaction
        outbox.assert_published(conn, "orders.created", key="order-42", json={"id": 42})

It loads only outbox_relay.testing (no Spark, no Kafka client, no driver): pytest loads the
plugin in every run of a project that installed outbox-relay.
"""

from __future__ import annotations

import pytest

from outbox_relay.testing.assertions import Outbox


@pytest.fixture
def outbox() -> Outbox:
    """Assertions on what the current transaction of a connection published to the outbox
    (outbox_relay.testing.assertions.Outbox); reads kafka_messages through that connection."""
    return Outbox()
