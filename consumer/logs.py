"""Structured JSON logs: one object per line, with session and input ids when known.

Fields come from ``extra=``; only names in ``SAFE_FIELDS`` are written, so a careless
``extra={"text": ...}`` never leaks message text or a secret into the logs. Exceptions are
logged by type and first line only; the traceback goes out at DEBUG.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["SAFE_FIELDS", "JsonFormatter", "configure_logging"]

SAFE_FIELDS = frozenset(
    {
        "session_id", "input_id", "kind", "topic", "partition", "offset", "version",
        "messages", "schedule", "llm_calls", "conflicts", "attempt", "delay_s", "reason",
        "error", "rows", "partitions", "group_id", "port", "agent", "decision", "committed",
        "in_flight", "abandoned",
    }
)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line with time, level, logger, message and safe extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in SAFE_FIELDS:
            if name in record.__dict__:
                entry[name] = record.__dict__[name]
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            entry["exception"] = type(exc).__name__
            if record.levelno <= logging.DEBUG:
                entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO") -> None:
    """Send every ``turnflow.*`` log to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("turnflow")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
