"""outbox-relay: a transactional-outbox relay from PostgreSQL to Kafka.

An application writes the outbox with `relay.publish` and `relay.publish_many`
(relay.outbox.publisher). Importing the package loads only that publisher and its rules: no
Spark, no Kafka client, no database driver.
"""

from relay.outbox.checks import Message
from relay.outbox.publisher import publish, publish_many

__all__ = ["Message", "publish", "publish_many"]
