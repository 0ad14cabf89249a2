"""Launching the relay on Spark: the JVM packages it needs (packages), resolving their
jars once into the per-user cache (ivy, spark_jars, cache), building the SparkSession
(spark) and re-running itself as a spark-submit that carries them (launcher). Before any
of it, every command checks that this Python has the `[relay]` extra's modules, and the
run the `[spark]` extra's (extras). The relay's process sets up its interpreter first: its garbage
collector, and pyspark imported from the installed package, not spark-submit's zip
(interpreter).

`cache` lives here, although the local stack uses it too: the stack already builds on
this package (its Kafka broker's jars come through ivy and packages), so the stack
depending on `outbox_relay.launch` keeps one direction; the launch never imports the stack."""
