"""outbox-relay: a transactional-outbox relay from PostgreSQL to Kafka.

An application writes the outbox with `relay.publish` and `relay.publish_many`
(relay.outbox.publisher), or from async code with `relay.publish_async` and
`relay.publish_many_async` (relay.outbox.publisher_async). Importing the package loads only
those publishers and their rules: no Spark, no Kafka client, no database driver.
"""

from relay.outbox.checks import Message
from relay.outbox.publisher import publish, publish_many
from relay.outbox.publisher_async import publish_async, publish_many_async

__all__ = ["Message", "publish", "publish_async", "publish_many", "publish_many_async"]
