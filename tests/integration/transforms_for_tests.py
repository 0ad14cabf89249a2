"""Transforms that topic rules of the tests name (`tests.integration.transforms_for_tests:NAME`):
one that keeps the contract (encrypts a JSON field, rewrites the key, adds a header) and
ones that break it in each way the relay must catch."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# A test key (AES-128); the consumer side decrypts with the same one.
SECRET_KEY = "0123456789abcdef"
SECRET_FIELD = "secret"
MARK_HEADER = "encrypted-field"
NOT_A_FUNCTION = 42
# How long `hold_marked` holds the task of the row whose value is `hold-me`.
HOLD_S = 45.0


def _marked(df: DataFrame, marker: str) -> Column:
    return F.col("value") == F.lit(marker.encode())


def encrypt_secret(df: DataFrame) -> DataFrame:
    """Replaces the `secret` field of a JSON object value by base64(AES-GCM(secret)), adds
    a header naming the field, and prefixes the key: a changed key must not move a row."""
    text = F.col("value").cast("string")
    parsed = F.from_json(text, "map<string,string>")
    encrypted = F.to_json(F.transform_values(
        parsed,
        lambda k, v: F.when(k == SECRET_FIELD,
                            F.base64(F.aes_encrypt(v, F.lit(SECRET_KEY), F.lit("GCM"))))
        .otherwise(v),
    ))
    value = F.when(parsed.isNull(), F.col("value")).otherwise(encrypted.cast("binary"))
    headers = F.map_concat(F.coalesce(F.col("headers"), F.create_map().cast("map<string,string>")),
                           F.create_map(F.lit(MARK_HEADER), F.lit(SECRET_FIELD)))
    key = F.when(F.col("key").isNotNull(), F.concat(F.lit(b"enc:"), F.col("key")))
    return df.withColumn("value", value).withColumn("headers", headers).withColumn("key", key)


def identity(df: DataFrame) -> DataFrame:
    return df


def drop_marked(df: DataFrame) -> DataFrame:
    """Drops the rows whose value is `drop-me`."""
    return df.where(~_marked(df, "drop-me") | F.col("value").isNull())


def drop_everything(df: DataFrame) -> DataFrame:
    """Leaves every task empty: no row remains to fail on."""
    return df.where(F.lit(False))


def duplicate_marked(df: DataFrame) -> DataFrame:
    """Emits the row whose value is `dup-me` twice, in its own task."""
    copies = F.when(_marked(df, "dup-me"), F.array(F.lit(1), F.lit(2))).otherwise(F.array(F.lit(1)))
    return df.withColumn("_copy", F.explode(copies)).drop("_copy")


def reorder_marked(df: DataFrame) -> DataFrame:
    """Moves the row whose value is `swap-me` behind the rest of its task."""
    last = F.when(_marked(df, "swap-me"), F.lit(2**62)).otherwise(F.col("id"))
    return df.sortWithinPartitions(last)


def repartition(df: DataFrame) -> DataFrame:
    return df.repartition(3)


def shift_ids(df: DataFrame) -> DataFrame:
    return df.withColumn("id", F.col("id") + 1000)


def forge_reserved_header(df: DataFrame) -> DataFrame:
    forged = F.create_map(F.lit("outbox-relay.id"), F.lit("1"))
    return df.withColumn("headers", forged)


def lose_relay_column(df: DataFrame) -> DataFrame:
    return df.select("id", "topic", "key", "value", "headers", "created_at")


def not_a_dataframe(df: DataFrame) -> str:
    return "nothing"


def hold_marked(df: DataFrame) -> DataFrame:
    """Keeps the contract, but the task of the row whose value is `hold-me` takes HOLD_S
    seconds more (a Python UDF, run by the executors' Python worker): a round that lasts."""
    held = HOLD_S

    def value(v: bytes | None) -> bytes | None:
        if v == b"hold-me":
            import time

            time.sleep(held)
        return v

    return df.withColumn("value", F.udf(value, "binary")(F.col("value")))
