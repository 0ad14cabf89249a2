"""Every external artifact version the relay depends on, in one place.

pyspark and delta-spark are pinned in pyproject.toml; the JVM packages below must
match them. delta-spark 4.4.0 is built for Spark 4.2 / Scala 2.13; the 4.4.1 jar is not
published, so the Python and JVM sides are both pinned to 4.4.0.
"""

from __future__ import annotations

SPARK_VERSION = "4.2.0"
SCALA_BINARY = "2.13"
DELTA_VERSION = "4.4.0"
POSTGRES_JDBC_VERSION = "42.7.8"
KAFKA_BROKER_VERSION = "4.1.1"

SPARK_PACKAGES: tuple[str, ...] = (
    f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}",
    f"io.delta:delta-spark_4.2_{SCALA_BINARY}:{DELTA_VERSION}",
    f"org.postgresql:postgresql:{POSTGRES_JDBC_VERSION}",
)

KAFKA_BROKER_ARTIFACT = f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_BROKER_VERSION}"


def spark_packages_conf() -> str:
    """The value for `spark.jars.packages`."""
    return ",".join(SPARK_PACKAGES)
