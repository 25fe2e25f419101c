"""Loading sessions, their history and what the consumer must know before a turn, in one statement.

One row per session asked for (several at once when turns start together; the consumer groups
them), in the order asked.

Besides the session's state, version and history, the statement answers the questions the
consumer otherwise asked in round trips of their own: which of the turn's source records are
already in the turn log, among a burst turn's `turn_sources` or among the records the consumer
dead-lettered (`dead_lettered_sources`) (a replay, skipped exactly),
which of its input ids the conversation already had (a duplicate re-produced at another
offset, however long ago), and how many of the session's outbox rows are still unpublished
(when none are, the turn's own rows need no fetch of older ones first).

History is derived from the turn log, oldest first, as the engine's transcript: a turn whose
input is a message gives a user entry (`at` = the input's `at`, else the turn's time) — a burst
turn one per message, its earlier messages first — and each message the turn sent gives an
assistant entry (`at` = the turn's time). Each turn's save writes the entries it gives into
`turns.history` (`turn_entries`), and the load reads them from there, so a conversation's
entries are built once, not again on every later turn; a row saved before that column existed
holds NULL, and the load builds its entries with the same expression. Only the last N turns
that produced any entry are read, so the cost does not grow with the length of the log; they
are read through an index that holds only such turns (`ix_turns_history`, whose predicate is
this read's own condition, word for word), so the read does not pass over the wakes and events
in between that sent nothing either. The turn log is partitioned by month
(store/partitions.py); the read is bounded to turns at or after the session's `turns_since` (its
earliest turn's time, kept by the save, store/saving.py), so the months before the conversation
began are pruned when the statement runs, and a long-lived log costs a short conversation
nothing. A session begun before that column was kept has none, and its read looks at every
month.

The history comes back as the JSON text the database wrote, not decoded by the driver: the
store decodes it into `LoadedSession.history`, or, when the caller asks for the text
(`history_as_text`), hands it over as it is for the caller to validate straight from the text
in one pass (the consumer builds the engine's entries from it; decoding into dicts first cost
twice as much for a 50-entry window).

A consumer that already holds a session's window (it served the session's last turn and
extended the window with the entries that turn's save returned) says for which version
(`LoadRequest.history_version`); while the session is still at that version the statement
leaves the history out (NULL, never otherwise: an empty history is `[]`) and reads no turn for
it. The window is a function of the version because the turn log only grows: a save appends
one turn at the next version, and nothing deletes a turn or changes its entries (`turnflow
prune` only drops recordings, kept in `turn_recordings`; `turnflow erase` deletes the session
with its turns, so a later turn under its id starts from nothing).

The same holds for the replay and duplicate checks: each source record and input id is one
probe of a unique index, written as a scalar subquery with `LIMIT 1`. Written as `EXISTS ... OR
EXISTS ...`, PostgreSQL may instead hash every row of `turns` (or every turn of the
conversation) on each load, because it guesses that a JSON list holds 100 entries; on a log of
10,000 turns that made a load cost four to six saves (`bench/load_bench.py`).
"""

from __future__ import annotations

from typing import Any

from engine.history import decode_entries
from store import jsoncodec
from store.direct import positional

GIVES_ENTRIES = "input ? 'message' OR jsonb_array_length(messages) > 0"
"""The turns that give history entries: the load's condition and, word for word, the predicate
of ``ix_turns_history`` (store/schema.py), so PostgreSQL reads the entries from that index."""


def turn_entries(input: str, messages: str, created_at: str) -> str:
    """SQL for the history entries one turn gives, as a jsonb array in transcript order, from
    the SQL expressions of its ``input``, ``messages`` and ``created_at``: a burst's earlier
    messages, then the message (both only when the input holds a message), then each message
    the turn sent. Never NULL: a turn that gives none has ``[]``.

    The save writes it into ``turns.history`` (store/saving.py), so a load reads each turn's
    entries as they are instead of building them again on every turn of the conversation; the
    load builds them with this same expression for a row saved before that column existed."""
    at = f"to_jsonb({created_at})"
    return f"""(
    CASE WHEN {input} ? 'message' THEN
        CASE WHEN jsonb_typeof({input} -> 'burst') = 'array' THEN coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'role', 'user',
                'text', b.part ->> 'message',
                'at', coalesce(nullif(b.part -> 'at', 'null'::jsonb), {at})
            ) ORDER BY b.ord)
            FROM jsonb_array_elements({input} -> 'burst') WITH ORDINALITY AS b(part, ord)
        ), '[]'::jsonb) ELSE '[]'::jsonb END
        || jsonb_build_array(jsonb_build_object(
            'role', 'user',
            'text', {input} ->> 'message',
            'at', coalesce(nullif({input} -> 'at', 'null'::jsonb), {at})
        ))
    ELSE '[]'::jsonb END
    || CASE WHEN jsonb_array_length({messages}) = 0 THEN '[]'::jsonb ELSE (
        SELECT jsonb_agg(jsonb_build_object(
            'role', 'assistant', 'text', m.msg ->> 'text', 'at', {at}
        ) ORDER BY m.ord)
        FROM jsonb_array_elements({messages}) WITH ORDINALITY AS m(msg, ord)
    ) END
)"""


_LOAD = """
SELECT q.n, s.version, s.state, (
    SELECT coalesce(array_agg(x.n ORDER BY x.n), '{}')
    FROM ROWS FROM (
        jsonb_to_recordset(CAST(q.sources AS jsonb)) AS (topic text, part integer, off bigint)
    ) WITH ORDINALITY AS x(topic, part, off, n)
    WHERE (
        SELECT 1 FROM turns
        WHERE source_topic = x.topic AND source_partition = x.part AND source_offset = x.off
        LIMIT 1
    ) IS NOT NULL OR (
        SELECT 1 FROM turn_sources
        WHERE source_topic = x.topic AND source_partition = x.part AND source_offset = x.off
        LIMIT 1
    ) IS NOT NULL OR (
        SELECT 1 FROM dead_lettered_sources
        WHERE source_topic = x.topic AND source_partition = x.part AND source_offset = x.off
    ) IS NOT NULL
) AS applied, (
    SELECT coalesce(array_agg(x.n ORDER BY x.n), '{}')
    FROM jsonb_array_elements_text(CAST(q.input_ids AS jsonb)) WITH ORDINALITY AS x(input_id, n)
    WHERE (
        SELECT 1 FROM turns WHERE session_id = q.session_id AND input_id = x.input_id LIMIT 1
    ) IS NOT NULL OR (
        SELECT 1 FROM turn_sources
        WHERE session_id = q.session_id AND input_id = x.input_id LIMIT 1
    ) IS NOT NULL) AS duplicate, (
    SELECT count(*) FROM outbox
    WHERE session_id = q.session_id AND published_at IS NULL
) AS unpublished, CAST(CASE WHEN s.version = q.held THEN NULL ELSE (
    SELECT coalesce(jsonb_agg(h.entry ORDER BY h.version, h.ord), '[]'::jsonb)
    FROM (
        SELECT e.entry, t.version, e.ord
        FROM (
            SELECT version, coalesce(history, {entries}) AS entries
            FROM turns
            WHERE session_id = q.session_id
              AND created_at >= coalesce(s.turns_since, '-infinity')
              AND ({gives_entries})
            ORDER BY version DESC
            LIMIT :history_limit
        ) AS t
        CROSS JOIN LATERAL jsonb_array_elements(t.entries) WITH ORDINALITY AS e(entry, ord)
        ORDER BY t.version DESC, e.ord DESC
        LIMIT :history_limit
    ) AS h
) END AS text) AS history
FROM unnest(
    CAST(:session_ids AS text[]), CAST(:sources AS text[]), CAST(:input_ids AS text[]),
    CAST(:history_versions AS bigint[])
) WITH ORDINALITY AS q(session_id, sources, input_ids, held, n)
LEFT JOIN sessions AS s ON s.id = q.session_id
ORDER BY q.n
"""

LOAD = positional(
    _LOAD.replace("{gives_entries}", GIVES_ENTRIES).replace(
        "{entries}", turn_entries("turns.input", "turns.messages", "turns.created_at")
    )
)


def history_entries(raw: Any) -> list[dict[str, Any]]:
    """Decode the aggregated jsonb history into engine transcript entries
    (``engine.history.decode_entries`` with the store's jsonb decoder)."""
    return decode_entries(raw, jsoncodec.loads)
