"""Hostile text in log lines: whatever a session id, a key or a message holds, each log line
stays one line to ``str.splitlines()`` and to a terminal (no raw line separator, no C1 control,
no bidirectional control), and still parses to the same strings."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.logs import BIDI_CONTROLS, JsonFormatter
from tests.turns.test_hostile_input import _good, run_loop

_TRICKY = "\n\r\x0b\x0c\x1b\x1c\x1d\x1e\x85\x9b\u2028\u2029\u061c\u200e\u200f" + "".join(
    chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
)
_SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
logged_text = st.text(alphabet=st.characters() | st.sampled_from(_TRICKY) | _SURROGATE,
                      max_size=300)


def _one_safe_line(line: str) -> dict[str, object]:
    assert line.splitlines() == [line]
    assert not any(ord(c) in BIDI_CONTROLS or 0x80 <= ord(c) < 0xA0 for c in line)
    line.encode("utf-8")
    parsed = json.loads(line)
    assert isinstance(parsed, dict)
    return parsed


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("turnflow.test", logging.INFO, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return record


@given(logged_text, logged_text, logged_text, st.lists(logged_text, max_size=4))
def test_any_logged_string_makes_one_line_without_separators_or_bidi_controls(
    message: str, session_id: str, key: str, partitions: list[str]
) -> None:
    """The message and every string field, any unicode included, give exactly one line that
    ``splitlines()`` does not split and that holds no bidirectional or C1 control; parsed
    back, a short field is the same string (lone surrogates aside, which are escaped)."""
    line = JsonFormatter().format(
        _record(message, session_id=session_id, input_id=key, partitions=partitions)
    )
    parsed = _one_safe_line(line)
    if len(session_id) <= 200 and not any(0xD800 <= ord(c) <= 0xDFFF for c in session_id):
        assert parsed["session_id"] == session_id


def test_a_traceback_at_debug_is_one_line_too() -> None:
    """An exception whose text holds line separators stays inside one line at DEBUG."""
    try:
        raise ValueError("a\u2028b\u202ec\x85d")
    except ValueError:
        import sys

        record = _record("failed")
        record.exc_info = sys.exc_info()
        record.levelno = logging.DEBUG
    line = JsonFormatter().format(record)
    parsed = _one_safe_line(line)
    assert "a\u2028b\u202ec\x85d" in str(parsed["traceback"])


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def service_lines() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("turnflow")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_the_service_logs_hostile_session_ids_on_one_line_each(service_lines: _Lines) -> None:
    """Twenty conversations whose ids hold line separators and bidi controls run through the
    consumer loop next to twenty plain ones, and some of their records are refused: every
    line the service logs is one line with no bidi control, and the ids read back intact."""
    hostile = [f"s{n}{c}x" for n, c in enumerate("\u2028\u2029\x85\u202e\u2066\u200f\u061c"
                                                 "\u202a\u202b\u202c\u202d\u2067\u2068\u2069"
                                                 "\u200e\x9b\x1b\n\r\x0b")]
    plain = [f"p{n}" for n in range(20)]
    records: list[tuple[bytes | None, bytes | None]] = []
    for session in hostile + plain:
        records.append((session.encode(), _good("one", session)))
        records.append((b"another-key", _good("two", session)))  # key-mismatch: refused
    store, _producer = asyncio.run(run_loop(records))
    assert len(store.applied) == 40
    assert service_lines.lines
    logged_ids = set()
    for line in service_lines.lines:
        parsed = _one_safe_line(line)
        if isinstance(parsed.get("session_id"), str):
            logged_ids.add(parsed["session_id"])
    assert set(hostile) & logged_ids  # the hostile ids were logged, and read back intact
