"""Turns a failed Spark write into a one-line reason, and tells an outage from poison."""

from __future__ import annotations

import re

_KAFKA_ERROR = re.compile(
    r"(org\.apache\.kafka\.common\.(?:errors\.)?[A-Za-z]+(?:Exception|Error)[^\n]*)"
)
_JAVA_ERROR = re.compile(r"((?:[a-z]+\.)+[A-Z][A-Za-z]*(?:Exception|Error):[^\n]*)")
# What PostgreSQL's JDBC driver raises on the executors when the read of the batch fails.
_READ_ERROR = re.compile(r"(org\.postgresql\.util\.PSQLException[^\n]*)")

# Errors that sending again will not cure. Anything else (timeouts, a broker going
# away, not enough replicas) is an outage: the topic backs off, nothing is parked.
# A denied ACL (TopicAuthorizationException) is an outage too: an operator fixes it and
# the same rows then go through, so parking them would only hurt.
# The last alternative is what the producer reports for the healthy neighbours of an
# invalid record in the same produce batch.
# The parenthesised names are librdkafka's, as the direct lane words a report
# (outbox_relay.direct.send.REFUSED_FOR_GOOD; tests/unit/test_direct_send.py pins the two).
_FOR_GOOD = re.compile(
    r"RecordTooLargeException|RecordBatchTooLargeException|InvalidTopicException|"
    r"InvalidRecordException|PolicyViolationException|"
    r"CorruptRecordException|SerializationException|InvalidRequestException|"
    r"part of a batch which had one more more invalid records|"
    r"\((?:MSG_SIZE_TOO_LARGE|INVALID_RECORD|POLICY_VIOLATION|INVALID_MSG|"
    r"RECORD_LIST_TOO_LARGE|TOPIC_EXCEPTION|UNSUPPORTED_FOR_MESSAGE_FORMAT)\)"
)


def refused_for_good(reason: str) -> bool:
    return bool(_FOR_GOOD.search(reason))


def read_failed(reason: str) -> bool:
    """Whether `reason` (from describe_failure) is the JDBC read's: the database, not
    Kafka, failed the write."""
    return reason.startswith("org.postgresql.")


def describe_failure(exc: BaseException) -> str:
    """The Kafka client's own exception line if there is one (a for-good one first),
    else PostgreSQL's driver's (the JDBC read failed), else the first Java exception
    line, else the first line."""
    text = str(exc)
    kafka = [m.strip() for m in _KAFKA_ERROR.findall(text)]
    for line in sorted(kafka, key=lambda line: not refused_for_good(line)):
        return line[:1000]
    read = _READ_ERROR.search(text)
    if read:
        return read.group(1).strip()[:1000]
    match = _JAVA_ERROR.search(text)
    if match:
        return match.group(1).strip()[:1000]
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:1000]


# Kinds of send failure, for outbox_relay_send_failures_total. A topic-level refusal
# concerns every message of the topic; a record-level one a single message.
_TOPIC_LEVEL = re.compile(
    r"InvalidTopicException|UnknownTopicOrPartitionException|TopicAuthorizationException|"
    r"PolicyViolationException|does not exist|not present in metadata"
)
_TIMEOUT = re.compile(r"TimeoutException|timed out|Expiring \d+ record", re.IGNORECASE)
OUTAGE_PREFIX = "Kafka unavailable: "


def failure_kind(reason: str) -> str:
    """outage (Kafka was found down), topic, record (refused for good), timeout, or other."""
    if reason.startswith(OUTAGE_PREFIX):
        return "outage"
    if _TOPIC_LEVEL.search(reason):
        return "topic"
    if refused_for_good(reason):
        return "record"
    if _TIMEOUT.search(reason):
        return "timeout"
    return "other"
