"""What the inspector's search reads, as SQL expressions with a trigram index each.

An operator hears "the bot asked my name twice" with a phone number, a name or a booking
reference, never a session id. Each table's searchable text is one expression over its row:

- `TURN_TEXT`: a turn's words and ids, not its JSON: its input id, its source record as
  `topic:partition:offset`, the customer's message (each message of a burst), for any other
  input (an event and its payload, a wake's key, a start) the input as JSON without its session
  id, the texts the agent sent and their keys; the first `TURN_TEXT_CHARS` characters of that.
  Its index holds its words (`TURN_WORDS`), not trigrams: trigrams of the turn's whole JSON
  (keys, timestamps, session ids and all) cost as much again as the turn itself;
- `SESSION_TEXT`: the data a conversation holds (the field values: a name, a phone, a booking
  reference);
- `DEAD_LETTER_TEXT`: a dead-lettered record's words, input id, key, session id and source.

Each has a GIN index on exactly that expression (trigrams, `pg_trgm`, migration 0016; the
turns' words, migration 0024), so a search reads the index, not the table, however long the
turn log. The expressions are fixed SQL; the migration writes them out as they are at its
revision. The customer's message is searched as written; JSON values (the agent's texts in their
list, an event's payload) as their text (`jsonb` printed), so a quote there matches only as the
JSON escape `\\"`.
"""

from __future__ import annotations

__all__ = [
    "DEAD_LETTER_TEXT", "INDEXES", "SESSION_TEXT", "TURN_TEXT", "TURN_TEXT_CHARS", "TURN_WORDS",
    "like_pattern",
]

TURN_TEXT_CHARS = 2000
"""How much of a turn's words the search reads: a text further in is not found."""

TURN_TEXT = (
    "(left(coalesce(input_id, '') || ' ' || coalesce(source_topic || ':' "
    "|| CAST(source_partition AS text) || ':' || CAST(source_offset AS text), '') || ' ' "
    "|| CASE WHEN input ? 'message' OR input ? 'burst' THEN coalesce(input ->> 'message', '') "
    "|| ' ' || coalesce(CAST(jsonb_path_query_array(input, '$.burst[*].message') AS text), '') "
    "ELSE CAST(input - 'session_id' AS text) END || ' ' "
    "|| coalesce(CAST(jsonb_path_query_array(messages, '$[*].text') AS text), '') || ' ' "
    "|| coalesce(CAST(jsonb_path_query_array(messages, '$[*].key') AS text), ''), "
    f"{TURN_TEXT_CHARS}))"
)

SESSION_TEXT = "(coalesce(CAST(state -> 'data' AS text), ''))"

DEAD_LETTER_TEXT = (
    "(coalesce(message, '') || ' ' || coalesce(input_id, '') || ' ' || coalesce(record_key, '')"
    " || ' ' || session_id || ' ' || source_topic || ':' || CAST(source_partition AS text)"
    " || ':' || CAST(source_offset AS text))"
)

TURN_WORDS = f"(to_tsvector('simple', {TURN_TEXT}))"
"""The words of `TURN_TEXT`, which the turns' index holds: a search finds the turns holding
every word of the searched text (`@@ plainto_tsquery('simple', …)`, through the index) and then
keeps those whose `TURN_TEXT` holds the text as typed (`ILIKE`). A word index costs a turn a
fraction of what trigrams of the same text do (tests/store/test_search_size.py); what it gives
up is a part of a word: `Mart` does not find `Marta` (the sessions' data and dead letters keep
trigram indexes, which do)."""

INDEXES = {
    "ix_turns_words": ("turns", TURN_WORDS, ""),
    "ix_sessions_search": ("sessions", SESSION_TEXT, "gin_trgm_ops"),
    "ix_dead_lettered_sources_search": ("dead_lettered_sources", DEAD_LETTER_TEXT, "gin_trgm_ops"),
}
"""Each search index: its table, the expression it is on and its operator class (GIN). Not in
``store.schema``'s metadata: alembic cannot compare an expression index's text."""


def like_pattern(text: str) -> str:
    """An ``ILIKE`` pattern matching ``text`` anywhere, its ``%``, ``_`` and ``\\`` literal."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
