"""What an operator looks at: status, the metrics, the logs, the notebook's numbers.

The status and database-side metrics are control-plane code only (psycopg2, delta-rs):
they import no pyspark and start no JVM. The runtime metrics, log format and progress
line belong to a running relay.
"""

# The label of the one series the topics beyond `metrics.max_label_topics` are summed
# into: parentheses are illegal in Kafka topic names, so no real topic can collide with it.
# The runtime counters and the database-side gauges share it.
OTHER_TOPICS = "(other)"
