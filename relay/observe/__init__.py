"""What an operator looks at: status, the database-side metrics, the notebook's numbers.

Control-plane code only (psycopg2, delta-rs): nothing here imports pyspark or starts a JVM.
"""

# Per-topic metric series before the rest are folded into topic="other".
DEFAULT_TOP_TOPICS = 100
