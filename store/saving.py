"""The save transaction: session + turn-log row + charge + outbox rows in ONE statement.

A single statement with data-modifying CTEs is atomic on its own, so on an autocommit
connection the whole save is one round trip (the statement is prepared once per connection and
reused). The turn and outbox inserts select from the session write, so when the version check
fails nothing is written at all; when the source record or the input's id is already in the
turn log a unique index aborts the statement and nothing is written either. A burst turn's
earlier records and ids go to `turn_sources` in the same statement, its model recording to
`turn_recordings` (pruned there without touching the turn), and a billed turn's
credits to `credit_ledger` (keyed by its input, unique): a charge is saved exactly when its
turn is. The turn-log row carries the history entries its turn gives (`turns.history`, built
by `store.history.turn_entries`), which later loads read as they are; the statement returns
them too, so a consumer holding the session's window extends it with exactly what a load
would read.

Concurrency: a new session is `INSERT ... ON CONFLICT DO NOTHING` (a concurrent creator waits
for the winner's commit, then inserts nothing); an existing one is `UPDATE ... WHERE version =
:expected` (a concurrent writer waits on the row lock, then re-checks the version and updates
nothing). Outbox ids are drawn after the session row is locked, so within a session they follow
commit order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store import jsoncodec
from store.direct import Positional, positional
from store.history import turn_entries
from store.input_ids import stored_input_id
from store.records import SaveRequest

# The turn log is partitioned (store/partitions.py), so no index keeps a source record or a
# session's input id unique across it: the session is written (and with it everything else)
# only when no turn has the record or, in the session, the input id. Saves of one session are
# serialized by its version check, so two cannot both pass; a turn-log row is one probe per
# partition of `ix_turns_source` / `ix_turns_input`.
_NOT_LOGGED = """
    (CAST(:source_topic AS text) IS NULL OR (
        SELECT 1 FROM turns WHERE source_topic = CAST(:source_topic AS text)
          AND source_partition = CAST(:source_partition AS integer)
          AND source_offset = CAST(:source_offset AS bigint) LIMIT 1
    ) IS NULL)
    AND (CAST(:input_id AS text) IS NULL OR (
        SELECT 1 FROM turns WHERE session_id = :session_id
          AND input_id = CAST(:input_id AS text) LIMIT 1
    ) IS NULL)
"""

# `sessions.turns_since`: no turn of the session is older (the earliest `created_at` any save
# gave it), which bounds the history read to the partitions from that month on
# (store/history.py). NULL for sessions begun before it was kept: no bound, every partition.
_INSERT_SESSION = """
    INSERT INTO sessions (id, version, state, turns_since)
    SELECT :session_id, :version, CAST(:state AS jsonb),
           coalesce(CAST(:created_at AS timestamptz), now())
    WHERE """ + _NOT_LOGGED + """
    ON CONFLICT (id) DO NOTHING
    RETURNING version
"""

_UPDATE_SESSION = """
    UPDATE sessions
    SET version = :version, state = CAST(:state AS jsonb), updated_at = now(),
        turns_since = CASE WHEN turns_since IS NOT NULL
            THEN least(turns_since, coalesce(CAST(:created_at AS timestamptz), now())) END
    WHERE id = :session_id AND version = :expected_version AND """ + _NOT_LOGGED + """
    RETURNING version
"""

_APPEND_TURN_AND_OUTBOX = """
, turn AS (
    INSERT INTO turns (
        session_id, version, input, messages, schedule, outcomes, started, ended, skipped,
        llm_calls, created_at, source_topic, source_partition, source_offset, clock_at,
        input_id, history, agent_id, agent_version, trace_id
    )
    SELECT :session_id, s.version, v.input, v.messages,
           CAST(:schedule AS jsonb), CAST(:outcomes AS jsonb), CAST(:started AS jsonb),
           CAST(:ended AS jsonb), CAST(:skipped AS jsonb), :llm_calls, v.created_at,
           CAST(:source_topic AS text), CAST(:source_partition AS integer),
           CAST(:source_offset AS bigint), CAST(:clock_at AS timestamptz),
           CAST(:input_id AS text),
           """ + turn_entries("v.input", "v.messages", "v.created_at") + """,
           CAST(:agent_id AS text), CAST(:agent_version AS integer), CAST(:trace_id AS text)
    FROM s, v
    RETURNING id, history
), recording AS (
    INSERT INTO turn_recordings (session_id, version, created_at, model_calls)
    SELECT :session_id, s.version, v.created_at, CAST(:model_calls AS jsonb)
    FROM s, v
    WHERE CAST(:model_calls AS jsonb) IS NOT NULL
), charge AS (
    INSERT INTO credit_ledger (
        workspace_id, agent_id, agent_version, session_id, turn_id, charge_key, credits, day,
        created_at
    )
    SELECT CAST(:workspace AS text), CAST(:agent_id AS text), CAST(:agent_version AS integer),
           :session_id, turn.id, CAST(:charge_key AS text), CAST(:credits AS integer),
           CAST(v.created_at AT TIME ZONE 'UTC' AS date), v.created_at
    FROM turn, v
    WHERE CAST(:credits AS integer) > 0
    RETURNING id
), earlier AS (
    INSERT INTO turn_sources (
        turn_id, session_id, source_topic, source_partition, source_offset, input_id
    )
    SELECT turn.id, :session_id, e.topic, e.part, e.off, e.input_id
    FROM turn, ROWS FROM (
        jsonb_to_recordset(CAST(:earlier AS jsonb))
            AS (topic text, part integer, off bigint, input_id text)
    ) AS e
    RETURNING id
), out AS (
    INSERT INTO outbox (session_id, topic, key, payload, traceparent, tracestate)
    SELECT :session_id, e.topic, e.key, e.payload, CAST(:traceparent AS text),
           CAST(:tracestate AS text)
    FROM s, ROWS FROM (
        jsonb_to_recordset(CAST(:outbox AS jsonb)) AS (topic text, key text, payload jsonb)
    ) WITH ORDINALITY AS e(topic, key, payload, n)
    ORDER BY e.n
    RETURNING id
)
SELECT (SELECT version FROM s) AS version,
       (SELECT history FROM turn) AS history,
       (SELECT count(*) FROM turn) AS turns,
       (SELECT count(*) FROM earlier) AS earlier,
       (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM out) AS outbox_ids
"""

# Built once, in asyncpg's form (``$n`` parameters): the store runs them on the pooled asyncpg
# connection directly (store/direct.py).
# The turn's input, messages and time, parsed once: its history entries read each of them
# several times, and a cast of a parameter in a generic plan would parse the text every time.
_TURN_VALUES = """
, v AS MATERIALIZED (
    SELECT CAST(:input AS jsonb) AS input, CAST(:messages AS jsonb) AS messages,
           coalesce(CAST(:created_at AS timestamptz), now()) AS created_at
)"""
SAVE_NEW = positional(
    "WITH s AS (" + _INSERT_SESSION + ")" + _TURN_VALUES + _APPEND_TURN_AND_OUTBOX
)
SAVE_EXISTING = positional(
    "WITH s AS (" + _UPDATE_SESSION + ")" + _TURN_VALUES + _APPEND_TURN_AND_OUTBOX
)


def save_statement(request: SaveRequest) -> Positional:
    """The statement for this request: insert for a new session, versioned update otherwise."""
    return SAVE_NEW if request.expected_version == 0 else SAVE_EXISTING


def save_parameters(request: SaveRequest) -> dict[str, Any]:
    """Bind parameters for `save_statement(request)`."""
    if request.expected_version < 0:
        raise ValueError(f"expected_version must be >= 0, got {request.expected_version}")
    turn = request.turn
    source = turn.source
    for name in ("created_at", "clock_at"):
        value = getattr(turn, name)
        if value is not None and value.tzinfo is None:
            raise ValueError(f"TurnRecord.{name} must be timezone-aware")
    parameters: dict[str, Any] = {
        "session_id": request.session_id,
        "version": request.expected_version + 1,
        "state": jsoncodec.dumps(request.state),
        "input": jsoncodec.dumps(turn.input),
        "messages": jsoncodec.dumps(turn.messages),
        "schedule": jsoncodec.dumps(turn.schedule),
        "outcomes": jsoncodec.dumps(turn.outcomes),
        "started": jsoncodec.dumps(turn.started),
        "ended": jsoncodec.dumps(turn.ended),
        "skipped": jsoncodec.dumps(turn.skipped),
        "llm_calls": turn.llm_calls,
        "created_at": turn.created_at,
        "clock_at": turn.clock_at,
        "model_calls": None if turn.model_calls is None else jsoncodec.dumps(turn.model_calls),
        "source_topic": source.topic if source else None,
        "source_partition": source.partition if source else None,
        "source_offset": source.offset if source else None,
        "input_id": stored_input_id(turn.input_id),
        "earlier": jsoncodec.dumps(
            [
                {
                    "topic": e.source.topic if e.source else None,
                    "part": e.source.partition if e.source else None,
                    "off": e.source.offset if e.source else None,
                    "input_id": stored_input_id(e.input_id),
                }
                for e in turn.earlier
            ]
        ),
        "outbox": jsoncodec.dumps(
            [{"topic": e.topic, "key": e.key, "payload": e.payload} for e in request.outbox]
        ),
        "agent_id": turn.agent_id,
        "agent_version": turn.agent_version,
        "workspace": turn.workspace,
        "credits": turn.credits,
        "charge_key": charge_key(request),
        "traceparent": request.traceparent,
        "tracestate": request.tracestate,
        "trace_id": trace_id_of(request.traceparent),
    }
    if request.expected_version > 0:
        parameters["expected_version"] = request.expected_version
    return parameters


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a W3C ``traceparent``, for the turn log: None without
    one, when it is not of that form, or when the trace was not sampled (its spans were never
    exported, so there is nothing to link to)."""
    if traceparent is None:
        return None
    parts = traceparent.split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[3]) < 2:
        return None
    try:
        sampled = int(parts[3][:2], 16) & 1
    except ValueError:
        return None
    return parts[1] if sampled else None


def charge_key(request: SaveRequest) -> str:
    """What a turn's charge is keyed by in its session: the input's own id, else its source
    record, else the version it saves (a turn saved without either, by a direct caller). A
    retried input keeps its id and a replayed record its source, so neither bills twice."""
    turn = request.turn
    stored = stored_input_id(turn.input_id)
    if stored is not None:
        return f"input:{stored}"
    if turn.source is not None:
        source = turn.source
        return f"source:{source.topic}:{source.partition}:{source.offset}"
    return f"version:{request.expected_version + 1}"


# -- many turns in one statement (group commit) -------------------------------------------------
#
# The same writes as above for several sessions at once: one row of `r` per save, each with its
# own version check. A save whose check fails writes nothing and comes back with a NULL
# version, exactly as it would alone; the others commit. Its rows' columns travel as parallel
# arrays (JSON as text, cast per row), one array per column. The caller gives each session at
# most once per statement, so `UPDATE ... FROM r` matches a session row to one save.

_SAVE_MANY = """
WITH r AS (
    SELECT * FROM unnest(
        CAST(:session_ids AS text[]), CAST(:expected_versions AS bigint[]),
        CAST(:states AS text[]), CAST(:inputs AS text[]), CAST(:messages AS text[]),
        CAST(:schedules AS text[]), CAST(:outcomes AS text[]), CAST(:starteds AS text[]),
        CAST(:endeds AS text[]), CAST(:skippeds AS text[]), CAST(:llm_calls AS integer[]),
        CAST(:created_ats AS timestamptz[]), CAST(:clock_ats AS timestamptz[]),
        CAST(:model_calls AS text[]), CAST(:source_topics AS text[]),
        CAST(:source_partitions AS integer[]), CAST(:source_offsets AS bigint[]),
        CAST(:input_ids AS text[]), CAST(:earliers AS text[]), CAST(:outboxes AS text[]),
        CAST(:agent_ids AS text[]), CAST(:agent_versions AS integer[]),
        CAST(:workspaces AS text[]), CAST(:credits AS integer[]), CAST(:charge_keys AS text[]),
        CAST(:traceparents AS text[]), CAST(:tracestates AS text[]), CAST(:trace_ids AS text[])
    ) WITH ORDINALITY AS r(
        session_id, expected_version, state, input, messages, schedule, outcomes, started,
        ended, skipped, llm_calls, created_at, clock_at, model_calls, source_topic,
        source_partition, source_offset, input_id, earlier, outbox, agent_id, agent_version,
        workspace, credits, charge_key, traceparent, tracestate, trace_id, n
    )
), fresh AS (
    -- The saves whose source record and input id no turn has (see _NOT_LOGGED).
    SELECT r.* FROM r
    WHERE (r.source_topic IS NULL OR (
        SELECT 1 FROM turns WHERE source_topic = r.source_topic
          AND source_partition = r.source_partition AND source_offset = r.source_offset LIMIT 1
    ) IS NULL)
    AND (r.input_id IS NULL OR (
        SELECT 1 FROM turns WHERE session_id = r.session_id AND input_id = r.input_id LIMIT 1
    ) IS NULL)
), updated AS (
    UPDATE sessions AS s
    SET version = r.expected_version + 1, state = CAST(r.state AS jsonb), updated_at = now(),
        turns_since = CASE WHEN s.turns_since IS NOT NULL
            THEN least(s.turns_since, coalesce(r.created_at, now())) END
    FROM fresh AS r
    WHERE r.expected_version > 0 AND s.id = r.session_id AND s.version = r.expected_version
    RETURNING s.id, s.version
), created AS (
    INSERT INTO sessions (id, version, state, turns_since)
    SELECT r.session_id, 1, CAST(r.state AS jsonb), coalesce(r.created_at, now()) FROM fresh AS r
    WHERE r.expected_version = 0
    ORDER BY r.n
    ON CONFLICT (id) DO NOTHING
    RETURNING id, version
), s AS (
    SELECT id, version FROM updated UNION ALL SELECT id, version FROM created
), saved AS (
    -- The JSON a turn's row is built from, parsed once here: referenced again and again below
    -- (its history entries read the input and messages several times each), a cast would parse
    -- the text on every reference.
    SELECT r.*, s.version AS new_version, CAST(r.input AS jsonb) AS input_json,
           CAST(r.messages AS jsonb) AS messages_json, coalesce(r.created_at, now()) AS logged_at
    FROM r JOIN s ON s.id = r.session_id
), turn AS (
    INSERT INTO turns (
        session_id, version, input, messages, schedule, outcomes, started, ended, skipped,
        llm_calls, created_at, source_topic, source_partition, source_offset, clock_at,
        input_id, history, agent_id, agent_version, trace_id
    )
    SELECT saved.session_id, saved.new_version, saved.input_json, saved.messages_json,
           CAST(saved.schedule AS jsonb), CAST(saved.outcomes AS jsonb),
           CAST(saved.started AS jsonb), CAST(saved.ended AS jsonb),
           CAST(saved.skipped AS jsonb), saved.llm_calls, saved.logged_at, saved.source_topic,
           saved.source_partition, saved.source_offset, saved.clock_at,
           saved.input_id,
           """ + turn_entries("saved.input_json", "saved.messages_json", "saved.logged_at") + """,
           saved.agent_id, saved.agent_version, saved.trace_id
    FROM saved
    ORDER BY saved.n
    RETURNING id, session_id, history
), recording AS (
    INSERT INTO turn_recordings (session_id, version, created_at, model_calls)
    SELECT saved.session_id, saved.new_version, saved.logged_at, CAST(saved.model_calls AS jsonb)
    FROM saved
    WHERE saved.model_calls IS NOT NULL
), charge AS (
    INSERT INTO credit_ledger (
        workspace_id, agent_id, agent_version, session_id, turn_id, charge_key, credits, day,
        created_at
    )
    SELECT saved.workspace, saved.agent_id, saved.agent_version, saved.session_id, turn.id,
           saved.charge_key, saved.credits, CAST(saved.logged_at AT TIME ZONE 'UTC' AS date),
           saved.logged_at
    FROM turn JOIN saved ON saved.session_id = turn.session_id
    WHERE saved.credits > 0
    RETURNING id
), earlier AS (
    INSERT INTO turn_sources (
        turn_id, session_id, source_topic, source_partition, source_offset, input_id
    )
    SELECT turn.id, turn.session_id, e.topic, e.part, e.off, e.input_id
    FROM turn JOIN saved ON saved.session_id = turn.session_id, ROWS FROM (
        jsonb_to_recordset(CAST(saved.earlier AS jsonb))
            AS (topic text, part integer, off bigint, input_id text)
    ) AS e
    RETURNING id
), out AS (
    INSERT INTO outbox (session_id, topic, key, payload, traceparent, tracestate)
    SELECT saved.session_id, e.topic, e.key, e.payload, saved.traceparent, saved.tracestate
    FROM saved, ROWS FROM (
        jsonb_to_recordset(CAST(saved.outbox AS jsonb)) AS (topic text, key text, payload jsonb)
    ) WITH ORDINALITY AS e(topic, key, payload, m)
    ORDER BY saved.n, e.m
    RETURNING id, session_id
)
SELECT r.n, s.version,
       (SELECT turn.history FROM turn WHERE turn.session_id = r.session_id) AS history,
       (SELECT coalesce(array_agg(out.id ORDER BY out.id), '{}') FROM out
        WHERE out.session_id = r.session_id) AS outbox_ids
FROM r LEFT JOIN s ON s.id = r.session_id
ORDER BY r.n
"""

SAVE_MANY = positional(_SAVE_MANY)

# Parameter of the single save -> array parameter of the statement above.
_MANY_COLUMNS = {
    "session_id": "session_ids",
    "state": "states",
    "input": "inputs",
    "messages": "messages",
    "schedule": "schedules",
    "outcomes": "outcomes",
    "started": "starteds",
    "ended": "endeds",
    "skipped": "skippeds",
    "llm_calls": "llm_calls",
    "created_at": "created_ats",
    "clock_at": "clock_ats",
    "model_calls": "model_calls",
    "source_topic": "source_topics",
    "source_partition": "source_partitions",
    "source_offset": "source_offsets",
    "input_id": "input_ids",
    "earlier": "earliers",
    "outbox": "outboxes",
    "agent_id": "agent_ids",
    "agent_version": "agent_versions",
    "workspace": "workspaces",
    "credits": "credits",
    "charge_key": "charge_keys",
    "traceparent": "traceparents",
    "tracestate": "tracestates",
    "trace_id": "trace_ids",
}


def save_many_parameters(requests: Sequence[SaveRequest]) -> dict[str, Any]:
    """Bind parameters for `SAVE_MANY` (each session at most once in `requests`)."""
    sessions = [r.session_id for r in requests]
    if len(set(sessions)) != len(sessions):
        raise ValueError("a session may appear only once in a group save")
    columns: dict[str, list[Any]] = {name: [] for name in _MANY_COLUMNS.values()}
    columns["expected_versions"] = []
    for request in requests:
        one = save_parameters(request)
        for single, many in _MANY_COLUMNS.items():
            columns[many].append(one[single])
        columns["expected_versions"].append(request.expected_version)
    return dict(columns)
