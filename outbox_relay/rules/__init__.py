"""The rules both runtimes need: what SQL decides in the database, Python decides the same way.

Each module names its SQL twin, and a contract test pins the two together on the real
database (tests/integration/test_rules_contract.py, test_key_order.py,
test_publisher_rules.py, test_outcome_values.py). Nothing here imports Spark, a Kafka
client or a database driver, so the publisher and the commands that only look can use them.

- partitioners: the partitioning key and Kafka's partitioners (SQL ``relay_partitioning_key``).
- topic_names: Kafka's rule for a legal topic name (no SQL twin: the driver refuses it).
- headers: the reserved headers every record carries (SQL ``relay_message_problem``).
- record_size: the size measure and bound (SQL ``relay_message_size``, ``relay_message_problem``).
- topic_rules: the per-topic rule lookup (the driver and the data plane both ask it).
- outcomes: the ledger's outcomes (SQL: relay_ledger_staging's CHECK constraints).
"""
