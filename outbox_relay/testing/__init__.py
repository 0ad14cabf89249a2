"""Helpers for an application's own tests: what a transaction published to the outbox.

`outbox_relay.testing.pytest_plugin` (registered as the pytest11 entry point `outbox_relay`, so
installing outbox-relay makes its `outbox` fixture available) gives an `Outbox`
(outbox_relay.testing.assertions); outbox_relay.testing.outbox reads the rows. Like `relay`, nothing
here imports Spark, a Kafka client or a database driver the caller has not imported.
"""

from outbox_relay.testing.assertions import ANY, Outbox
from outbox_relay.testing.outbox import PublishedMessage, published, published_async

__all__ = ["ANY", "Outbox", "PublishedMessage", "published", "published_async"]
