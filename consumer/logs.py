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

_HANDLER_NAME = "turnflow-json"

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
    """Send ``turnflow.*`` logs at ``level`` and other libraries' warnings to stderr as JSON
    lines (library records carry no extras, so only their message text is written)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.set_name(_HANDLER_NAME)
    ours = logging.getLogger("turnflow")
    ours.setLevel(level.upper())
    ours.propagate = False
    root = logging.getLogger()
    # Replace only a handler installed here before (calling twice must not double lines);
    # handlers others installed (a test runner's capture) stay.
    for logger in (ours, root):
        for old in [h for h in logger.handlers if h.get_name() == _HANDLER_NAME]:
            logger.removeHandler(old)
        logger.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
