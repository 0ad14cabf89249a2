"""Turns a failed Spark write into a one-line reason an operator can act on."""

from __future__ import annotations

import re

_KAFKA_ERROR = re.compile(
    r"(org\.apache\.kafka\.common\.errors\.[A-Za-z]+(?:Exception|Error)[^\n]*)"
)
_JAVA_ERROR = re.compile(r"((?:[a-z]+\.)+[A-Z][A-Za-z]*(?:Exception|Error):[^\n]*)")


def describe_failure(exc: BaseException) -> str:
    """The Kafka client's own exception line if there is one, else the first Java one."""
    text = str(exc)
    for pattern in (_KAFKA_ERROR, _JAVA_ERROR):
        match = pattern.search(text)
        if match:
            return match.group(1).strip()[:1000]
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:1000]
