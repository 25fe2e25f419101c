"""What the inspector's search reads, as SQL expressions with a trigram index each.

An operator hears "the bot asked my name twice" with a phone number, a name or a booking
reference, never a session id. Each table's searchable text is one expression over its row:

- `TURN_TEXT`: a turn's input (the customer's message, an event's payload, a timer's key), the
  messages it sent (the agent's words, each with its key), its input id and its source record
  as `topic:partition:offset`;
- `SESSION_TEXT`: the data a conversation holds (the field values: a name, a phone, a booking
  reference);
- `DEAD_LETTER_TEXT`: a dead-lettered record's words, input id, key, session id and source.

Each has a GIN trigram index (`pg_trgm`, migration 0015) on exactly that expression, so a
`ILIKE '%text%'` over it reads the index, not the table, however long the turn log. The
expressions are fixed SQL; the migration writes them out as they are at its revision. JSON
values are searched as their text (`jsonb` printed), so a quote in the searched text matches
only as the JSON escape `\\"`.
"""

from __future__ import annotations

__all__ = ["DEAD_LETTER_TEXT", "INDEXES", "SESSION_TEXT", "TURN_TEXT", "like_pattern"]

TURN_TEXT = (
    "(coalesce(input_id, '') || ' ' || CAST(input AS text) || ' ' "
    "|| coalesce(CAST(messages AS text), '') || ' ' "
    "|| coalesce(source_topic || ':' || CAST(source_partition AS text) || ':' "
    "|| CAST(source_offset AS text), ''))"
)

SESSION_TEXT = "(coalesce(CAST(state -> 'data' AS text), ''))"

DEAD_LETTER_TEXT = (
    "(coalesce(message, '') || ' ' || coalesce(input_id, '') || ' ' || coalesce(record_key, '')"
    " || ' ' || session_id || ' ' || source_topic || ':' || CAST(source_partition AS text)"
    " || ':' || CAST(source_offset AS text))"
)

INDEXES = {
    "ix_turns_search": ("turns", TURN_TEXT),
    "ix_sessions_search": ("sessions", SESSION_TEXT),
    "ix_dead_lettered_sources_search": ("dead_lettered_sources", DEAD_LETTER_TEXT),
}
"""Each search index: its table and the expression it is on (GIN, ``gin_trgm_ops``). Not in
``store.schema``'s metadata: alembic cannot compare an expression index's text."""


def like_pattern(text: str) -> str:
    """An ``ILIKE`` pattern matching ``text`` anywhere, its ``%``, ``_`` and ``\\`` literal."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
