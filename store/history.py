"""Loading a session and its history in one statement.

History is derived from the turn log, oldest first, as engine.md's transcript: a turn whose
input is a message gives a user entry (`at` = the input's `at`, else the turn's time), and each
message the turn sent gives an assistant entry (`at` = the turn's time). Only the last N turns
that produced any entry are read, so the cost does not grow with the length of the log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text

from store import jsoncodec

LOAD = text("""
SELECT s.version, s.state, (
    SELECT coalesce(jsonb_agg(h.entry ORDER BY h.version, h.ord), '[]'::jsonb)
    FROM (
        SELECT e.entry, t.version, e.ord
        FROM (
            SELECT version, input, messages, created_at
            FROM turns
            WHERE session_id = :session_id
              AND (input ? 'message' OR jsonb_array_length(messages) > 0)
            ORDER BY version DESC
            LIMIT :history_limit
        ) AS t
        CROSS JOIN LATERAL (
            SELECT 0::bigint AS ord, jsonb_build_object(
                'role', 'user',
                'text', t.input ->> 'message',
                'at', coalesce(nullif(t.input -> 'at', 'null'::jsonb), to_jsonb(t.created_at))
            ) AS entry
            WHERE t.input ? 'message'
            UNION ALL
            SELECT m.ord, jsonb_build_object(
                'role', 'assistant', 'text', m.msg ->> 'text', 'at', to_jsonb(t.created_at)
            )
            FROM jsonb_array_elements(t.messages) WITH ORDINALITY AS m(msg, ord)
        ) AS e
        ORDER BY t.version DESC, e.ord DESC
        LIMIT :history_limit
    ) AS h
) AS history
FROM (SELECT 1) AS one
LEFT JOIN sessions AS s ON s.id = :session_id
""")


def _parse_at(value: Any) -> Any:
    """ISO strings become aware datetimes; anything else is handed back as stored."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


def history_entries(raw: Any) -> list[dict[str, Any]]:
    """Decode the aggregated jsonb history into engine transcript entries."""
    entries: list[dict[str, Any]] = jsoncodec.loads(raw) or []
    for entry in entries:
        entry["at"] = _parse_at(entry.get("at"))
    return entries
