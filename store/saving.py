"""The save transaction: session + turn-log row + outbox rows in ONE statement.

A single statement with data-modifying CTEs is atomic on its own, so on an autocommit
connection the whole save is one round trip (the statement is prepared once per connection and
reused). The turn and outbox inserts select from the session write, so when the version check
fails nothing is written at all; when the source record or the input's id is already in the
turn log a unique index aborts the statement and nothing is written either. A burst turn's
earlier records and ids go to `turn_sources` in the same statement.

Concurrency: a new session is `INSERT ... ON CONFLICT DO NOTHING` (a concurrent creator waits
for the winner's commit, then inserts nothing); an existing one is `UPDATE ... WHERE version =
:expected` (a concurrent writer waits on the row lock, then re-checks the version and updates
nothing). Outbox ids are drawn after the session row is locked, so within a session they follow
commit order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import TextClause, text

from store import jsoncodec
from store.direct import Positional, positional
from store.input_ids import stored_input_id
from store.records import SaveRequest

_INSERT_SESSION = """
    INSERT INTO sessions (id, version, state)
    VALUES (:session_id, :version, CAST(:state AS jsonb))
    ON CONFLICT (id) DO NOTHING
    RETURNING version
"""

_UPDATE_SESSION = """
    UPDATE sessions
    SET version = :version, state = CAST(:state AS jsonb), updated_at = now()
    WHERE id = :session_id AND version = :expected_version
    RETURNING version
"""

_APPEND_TURN_AND_OUTBOX = """
, turn AS (
    INSERT INTO turns (
        session_id, version, input, messages, schedule, outcomes, started, ended, skipped,
        llm_calls, created_at, source_topic, source_partition, source_offset, clock_at,
        model_calls, input_id
    )
    SELECT :session_id, s.version, CAST(:input AS jsonb), CAST(:messages AS jsonb),
           CAST(:schedule AS jsonb), CAST(:outcomes AS jsonb), CAST(:started AS jsonb),
           CAST(:ended AS jsonb), CAST(:skipped AS jsonb), :llm_calls,
           coalesce(CAST(:created_at AS timestamptz), now()),
           CAST(:source_topic AS text), CAST(:source_partition AS integer),
           CAST(:source_offset AS bigint), CAST(:clock_at AS timestamptz),
           CAST(:model_calls AS jsonb), CAST(:input_id AS text)
    FROM s
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
    INSERT INTO outbox (session_id, topic, key, payload)
    SELECT :session_id, e.topic, e.key, e.payload
    FROM s, ROWS FROM (
        jsonb_to_recordset(CAST(:outbox AS jsonb)) AS (topic text, key text, payload jsonb)
    ) WITH ORDINALITY AS e(topic, key, payload, n)
    ORDER BY e.n
    RETURNING id
)
SELECT (SELECT version FROM s) AS version,
       (SELECT count(*) FROM turn) AS turns,
       (SELECT count(*) FROM earlier) AS earlier,
       (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM out) AS outbox_ids
"""

# Built once: parsing a statement's bind parameters costs more than running it on a warm pool.
SAVE_NEW = text("WITH s AS (" + _INSERT_SESSION + ")" + _APPEND_TURN_AND_OUTBOX)
SAVE_EXISTING = text("WITH s AS (" + _UPDATE_SESSION + ")" + _APPEND_TURN_AND_OUTBOX)


# The same two statements for the store's direct path (asyncpg's ``$n`` parameters).
SAVE_NEW_DIRECT = positional(SAVE_NEW)
SAVE_EXISTING_DIRECT = positional(SAVE_EXISTING)


def direct_statement(request: SaveRequest) -> Positional:
    """`save_statement(request)` in asyncpg's form."""
    return SAVE_NEW_DIRECT if request.expected_version == 0 else SAVE_EXISTING_DIRECT


def save_statement(request: SaveRequest) -> TextClause:
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
    }
    if request.expected_version > 0:
        parameters["expected_version"] = request.expected_version
    return parameters
