"""The reserved headers every record carries, after the configured prefix.

Consumers dedupe by (source, id). The data plane writes them (relay.data.records); the
control plane counts their bytes in the size check (relay.rules.record_size).

SQL twin: ``relay_message_problem`` refuses a row whose user headers carry the reserved
prefix and counts these headers' bytes through the per-topic allowance the claim passes in;
tests/integration/test_publisher_rules.py and test_rules_contract.py pin the two together.
"""

from __future__ import annotations

HEADER_ID = "id"
HEADER_SOURCE = "source"
HEADER_CREATED_AT = "created-at"
# created-at is ISO 8601 in UTC with microseconds (relay.data.records builds it).
CREATED_AT_CHARS = len("2026-11-26T06:22:39.123456Z")
