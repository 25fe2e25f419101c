"""Reading the turn log back for replays, and pruning the model recordings it holds.

A replay rebuilds each conversation from its turn-log rows, oldest version first: the input,
what the turn produced, the engine's clock for it (`clock_at`) and the model's recorded side
(`model_calls`, kept in `turn_recordings`). Recordings may hold personal data (the model's
extracted fields, its replies, with MODEL_RECORDING=prompts the prompts themselves), so they are
dropped after their retention period; the turn's row is the audit log and stays untouched.
"""

from __future__ import annotations

from sqlalchemy import text

from store import jsoncodec
from store.records import LoggedTurn

# Sessions with at least one turn in the window (either bound may be null), in id order.
SESSIONS_IN_WINDOW = text("""
    SELECT DISTINCT session_id FROM turns
    WHERE (CAST(:since AS timestamptz) IS NULL OR created_at >= CAST(:since AS timestamptz))
      AND (CAST(:until AS timestamptz) IS NULL OR created_at < CAST(:until AS timestamptz))
    ORDER BY session_id
""")

RECORDING = (
    "coalesce((SELECT r.model_calls FROM turn_recordings AS r"
    " WHERE r.session_id = turns.session_id AND r.version = turns.version), turns.model_calls)"
)
"""A turn's recording, as a column of a query over ``turns``: from ``turn_recordings``, else
(a turn saved before migration 0022) the turn's own ``model_calls``."""

TURNS_OF_SESSIONS = text(f"""
    SELECT session_id, version, input, messages, schedule, outcomes, started, ended, skipped,
           llm_calls, created_at, clock_at, {RECORDING} AS model_calls, agent_id, agent_version
    FROM turns
    WHERE session_id = ANY(CAST(:session_ids AS text[]))
    ORDER BY session_id, version
""")

# Recordings past the retention, a batch at a time: a delete in their own table, which leaves
# the turn's row as it is.
PRUNE_RECORDINGS = text("""
    DELETE FROM turn_recordings
    WHERE (session_id, version) IN (
        SELECT session_id, version FROM turn_recordings
        WHERE created_at < now() - make_interval(secs => :older_than_s)
        LIMIT :limit
    )
""")

# Recordings of turns saved before migration 0022, kept in the turn's row: clearing one
# rewrites that row, but only those rows (the partial index ``ix_turns_recorded`` finds them)
# ever need it, and none once they are past the retention.
PRUNE_ROW_RECORDINGS = text("""
    UPDATE turns SET model_calls = NULL
    WHERE id IN (
        SELECT id FROM turns
        WHERE model_calls IS NOT NULL
          AND created_at < now() - make_interval(secs => :older_than_s)
        LIMIT :limit
    )
""")


def logged_turns(rows: list[object]) -> list[LoggedTurn]:
    """Rows of TURNS_OF_SESSIONS as `LoggedTurn`s (jsonb decoded)."""
    out = []
    for row in rows:
        r = row._mapping  # type: ignore[attr-defined]
        out.append(
            LoggedTurn(
                session_id=r["session_id"],
                version=int(r["version"]),
                input=jsoncodec.loads(r["input"]),
                messages=jsoncodec.loads(r["messages"]),
                schedule=jsoncodec.loads(r["schedule"]),
                outcomes=jsoncodec.loads(r["outcomes"]),
                started=jsoncodec.loads(r["started"]),
                ended=jsoncodec.loads(r["ended"]),
                skipped=jsoncodec.loads(r["skipped"]),
                llm_calls=int(r["llm_calls"]),
                created_at=r["created_at"],
                clock_at=r["clock_at"],
                model_calls=jsoncodec.loads(r["model_calls"]) if r["model_calls"] else None,
                agent_id=r["agent_id"],
                agent_version=r["agent_version"],
            )
        )
    return out
