"""Kafka's murmur2 partition over whole Arrow batches: the ledger copy's bulk partitioner.

The Column expression (outbox_relay.data.partitioning.murmur2_col) runs without a Python worker,
which suits the sink's small batches, but it walks each key byte by byte through
interpreted higher-order functions: on a ledger copy of 240,000 rows it took 2.8 of the
copy's 4.4 s on an idle machine, and 6-19 s copies beside W2's rounds pushed their p99
up (reports/performance-history.md, W2C and SOAK). Here numpy hashes a batch one 4-byte block
position at a time across all its keys (outbox_relay.rules.murmur2_bulk): 240,000 keys in
about 30 ms.
"""

from __future__ import annotations

from typing import Any, cast

from pyspark.sql import Column
from pyspark.sql.pandas.functions import arrow_udf

from outbox_relay.rules.murmur2_bulk import murmur2_partitions


def murmur2_partition_col(key: Column, partitions: Column) -> Column:
    """murmur2_partitions as a Column: an Arrow UDF, evaluated a batch at a time."""
    # pyspark's stubs know only the form that names the UDF type: the type comes from
    # the hints (as outbox_relay.data.transform.RowCounter does).
    udf = cast(Any, arrow_udf)(murmur2_partitions, "int")
    return cast(Column, udf(key, partitions))
