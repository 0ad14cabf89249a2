"""The application's side of the outbox: `outbox_relay.publish` and `outbox_relay.publish_many`
write rows of kafka_messages in the caller's own transaction (publisher),
`outbox_relay.publish_async` and `outbox_relay.publish_many_async` the same from async code
(publisher_async), after the relay's own checks (checks), with one statement and its pages
(statement). Named `outbox`, not `publish`, so that it does not shadow the function
`outbox_relay.publish`. Like `relay` itself, it loads no Spark, Kafka client or database driver."""
