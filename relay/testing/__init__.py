"""Helpers for an application's own tests: what a transaction published to the outbox.

`relay.testing.pytest_plugin` (registered as the pytest11 entry point `outbox_relay`, so
installing outbox-relay makes its `outbox` fixture available) gives an `Outbox`
(relay.testing.assertions); relay.testing.outbox reads the rows. Like `relay`, nothing
here imports Spark, a Kafka client or a database driver the caller has not imported.
"""

from relay.testing.assertions import ANY, Outbox
from relay.testing.outbox import PublishedMessage, published, published_async

__all__ = ["ANY", "Outbox", "PublishedMessage", "published", "published_async"]
