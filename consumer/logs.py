"""Structured JSON logs: one object per line, with session and input ids when known.

Fields come from ``extra=``; only names in ``SAFE_FIELDS`` are written, so a careless
``extra={"text": ...}`` never leaks message text or a secret into the logs. Exceptions are
logged by type only; the traceback goes out at DEBUG.

Every line is bounded: ids and keys come from producers (a wake key can be 60 KB), so each
string field is cut at ``MAX_FIELD_CHARS`` and the message at ``MAX_MESSAGE_CHARS``, with the
number of characters cut said in place. Text that cannot be written as UTF-8 (a lone
surrogate) is escaped rather than failing the line.

Every line is one line to whatever reads it: JSON already escapes newlines and the C0 controls
(ANSI escapes start with one), and the line also escapes, as ``\\uXXXX``, what JSON leaves
alone but a reader or a terminal does not: the other line breaks ``str.splitlines()`` and
log shippers split on (U+0085, U+2028, U+2029), the C1 controls (U+0080 to U+009F, 8-bit
terminal escapes among them), and the bidirectional controls (U+061C, U+200E, U+200F, U+202A
to U+202E, U+2066 to U+2069) that reorder how a terminal shows the rest of the line. The
escaped line still parses to the same strings.
"""

from __future__ import annotations

import logging
import math
import sys
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_json

from consumer import tracing

__all__ = ["BIDI_CONTROLS", "MAX_FIELD_CHARS", "MAX_MESSAGE_CHARS", "SAFE_FIELDS",
           "JsonFormatter", "configure_logging"]

MAX_FIELD_CHARS = 200
MAX_MESSAGE_CHARS = 1000
_MAX_ITEMS = 50

_HANDLER_NAME = "turnflow-json"

SAFE_FIELDS = frozenset(
    {
        "session_id", "input_id", "kind", "topic", "partition", "offset", "version",
        "messages", "schedule", "llm_calls", "conflicts", "attempt", "delay_s", "reason",
        "error", "rows", "partitions", "group_id", "port", "agent", "decision", "committed",
        "in_flight", "abandoned", "kept_id", "timeout_s", "stopping", "position",
        "kafka_committed", "reread", "outages", "cause",
    }
)
_FIELD_ORDER = tuple(sorted(SAFE_FIELDS))

BIDI_CONTROLS = frozenset(
    {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
)
"""Code points that reorder the display of the text around them."""
_ESCAPED = {
    code: f"\\u{code:04x}"
    for code in (*range(0x80, 0xA0), 0x2028, 0x2029, *sorted(BIDI_CONTROLS))
}
"""Line breaks and controls a JSON encoder writes raw, as the JSON escapes they stand for."""


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (saying how many were cut), lone surrogates
    escaped."""
    if len(text) > limit:
        text = f"{text[:limit]}...(+{len(text) - limit} chars)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bounded(value: Any) -> Any:
    """A log field of bounded size: numbers as they are, strings clipped, lists shortened."""
    kind = type(value)
    # Fast path first: ids and counts, which is what nearly every per-turn field is.
    if kind is int or value is None or kind is float or kind is bool:
        return value
    if kind is str and len(value) <= MAX_FIELD_CHARS and value.isascii():
        return value
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        shown = [_bounded(item) for item in items[:_MAX_ITEMS]]
        if len(items) > _MAX_ITEMS:
            shown.append(f"...(+{len(items) - _MAX_ITEMS} items)")
        return shown
    return _clip(value if isinstance(value, str) else str(value), MAX_FIELD_CHARS)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line with time, level, logger, message and safe extras."""

    # The consumer writes a line per turn, so the formatting is kept cheap: the time's
    # seconds are formatted once per second, the fields are looked up in a fixed order, and
    # the line is encoded by pydantic-core (about 4x faster than ``json.dumps`` here).
    _second: int = -1
    _second_text: str = ""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self._time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": _clip(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        values = record.__dict__
        for name in _FIELD_ORDER:
            if name in values:
                entry[name] = _bounded(values[name])
        if (trace_ids := tracing.log_ids()) is not None:
            entry.update(trace_ids)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            entry["exception"] = type(exc).__name__
            if record.levelno <= logging.DEBUG:
                entry["traceback"] = self.formatException(record.exc_info)
        # NaN and infinities are not JSON: written as null, so every line parses.
        line = to_json(entry, fallback=str, inf_nan_mode="null").decode("utf-8")
        return line if line.isascii() else line.translate(_ESCAPED)

    def _time(self, created: float) -> str:
        """``created`` as ISO 8601 UTC with milliseconds, e.g. 2026-11-30T20:00:00.123+00:00."""
        second = math.floor(created)
        # Rounded to the microsecond as ``datetime.fromtimestamp`` rounds, then truncated.
        micros = round((created - second) * 1_000_000)
        if micros >= 1_000_000:
            second, micros = second + 1, 0
        if second != self._second:
            self._second_text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
            self._second = second
        return f"{self._second_text}.{micros // 1000:03d}+00:00"


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
    # The lines carry none of the caller's file, line, thread or process, so the record need
    # not look them up: the logging HOWTO's "Optimization" settings, about 1.6 µs of the ~9 µs
    # a turn's line costs.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
