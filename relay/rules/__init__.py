"""The rules both runtimes need: what SQL decides in the database, Python decides the same way.

Each module names its SQL twin, and a contract test pins the two together on the real
database (tests/integration/test_rules_contract.py, test_key_order.py,
test_publisher_rules.py). Nothing here imports Spark, a Kafka client or a driver, so the
publisher and the commands that only look can use them.

- partitioners: the partitioning key and Kafka's partitioners (SQL ``relay_partitioning_key``).
- topic_names: Kafka's rule for a legal topic name (SQL ``relay_message_problem``).
- headers: the reserved headers every record carries (SQL ``relay_message_problem``).
- record_size: the record-size bound (SQL ``relay_message_problem`` and the claim's pre-filter).
- topic_rules: the per-topic rule lookup (the driver and the data plane both ask it).
"""
