"""Logging set-up for the relay: human text, or one JSON object per line for shipping."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """time (UTC, ISO 8601), level, logger, message, and exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever sys.stderr is when a record comes, not when it was made."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure_logging(level: str, log_format: str = "text") -> None:
    """A handler on stderr for the root logger, replacing the one an earlier call made
    (tests, a relaunch), so that no line is printed twice; other handlers stay."""
    handler = _StderrHandler()
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _StderrHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("py4j").setLevel(logging.WARNING)
