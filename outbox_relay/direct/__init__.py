"""The direct lane: a small round's records sent by a Kafka producer in the driver.

A Spark job costs about the same for one row as for ten thousand (docs/performance.md),
so a round whose claims are small reads its rows on the driver (read), builds the same
records the Spark lane builds, byte for byte (records), and sends them with
librdkafka's idempotent producer (producer, send). The lock, claim, delete, ledger and
fencing around a round are the same for both lanes (outbox_relay.stream.round).
"""
