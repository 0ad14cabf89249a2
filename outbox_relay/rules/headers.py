"""The reserved headers every record carries, after the configured prefix.

Consumers dedupe by (source, id). The data plane writes them (outbox_relay.data.records); the
control plane counts their bytes in the size check (outbox_relay.rules.record_size).

SQL twin: ``relay_message_problem`` refuses a row whose user headers carry the reserved
prefix and counts these headers' bytes through the per-topic allowance the claim passes in;
tests/integration/test_publisher_rules.py and test_rules_contract.py pin the two together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:  # the publisher imports this module and must not load pyspark
    from pyspark.sql import Column

# The defaults of relay.header_prefix and relay.source_name (outbox_relay.config), here
# so that the publisher applies them without importing the config models (pydantic is no
# dependency of the base install).
DEFAULT_HEADER_PREFIX = "outbox-relay."
DEFAULT_SOURCE_NAME = "outbox-relay"

HEADER_ID = "id"
HEADER_SOURCE = "source"
HEADER_CREATED_AT = "created-at"
# created-at is ISO 8601 in UTC with microseconds (outbox_relay.data.records builds it).
CREATED_AT_CHARS = len("2026-11-26T06:22:39.123456Z")


@overload
def is_reserved(name: str, prefix: str) -> bool: ...
@overload
def is_reserved(name: Column, prefix: str) -> Column: ...
def is_reserved(name: str | Column, prefix: str) -> bool | Column:
    """Whether a user header name falls under the reserved prefix: the publisher asks it of
    a str, the transform check of a Spark column, and both have the same startswith (a
    plain prefix, no patterns), as SQL's ``left(name, length(prefix)) = prefix`` does."""
    return name.startswith(prefix)
