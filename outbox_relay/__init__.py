"""outbox-relay: a transactional-outbox relay from PostgreSQL to Kafka.

An application writes the outbox with `outbox_relay.publish` and `outbox_relay.publish_many`
(outbox_relay.outbox.publisher), or from async code with `outbox_relay.publish_async` and
`outbox_relay.publish_many_async` (outbox_relay.outbox.publisher_async). Importing the package loads
only those publishers and their rules: no Spark, no Kafka client, no database driver.
"""

from outbox_relay.outbox.checks import Message
from outbox_relay.outbox.publisher import publish, publish_many
from outbox_relay.outbox.publisher_async import publish_async, publish_many_async

__all__ = ["Message", "publish", "publish_async", "publish_many", "publish_many_async"]
