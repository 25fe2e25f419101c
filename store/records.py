"""The carriers the store takes and returns. Plain frozen dataclasses: the store is called on
every turn, and its inputs are already validated by the engine.

JSON-valued fields (`state`, `input`, `messages`, ...) are stored as jsonb; `datetime`, `date`,
`UUID`, `Decimal` and pydantic models inside them are written in their JSON form (ISO strings,
numbers), so they come back as strings — the engine's `migrate_session` parses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """Where an input came from; unique in the turn log, which makes replays exact."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn for the append-only turn log (the audit and the source of history).

    `input` is the turn request without `session`/`history`; the list fields are the
    `TurnResult` fields of the same names in their JSON form. `created_at` defaults to the
    database clock. `clock_at` is the time the engine's clock gave the turn (what a replay sets
    its clock to); `model_calls` is the turn's recording (`engine.recording.Tape.to_json()`
    plus the fields the turn wrote), None when recording is off. `input_id` is the input's own
    id in its conversation (a message's id, `event:{key}`, `start:{key}`; None for wakes and
    id-less messages): unique per session. `earlier` lists the other records a burst turn
    consumed (its earlier messages, oldest first); `source` and `input_id` are its last one's.
    """

    input: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)
    schedule: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    started: list[dict[str, Any]] = field(default_factory=list)
    ended: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0
    source: SourceRecord | None = None
    created_at: datetime | None = None
    clock_at: datetime | None = None
    model_calls: dict[str, Any] | None = None
    input_id: str | None = None
    earlier: tuple[ConsumedInput, ...] = ()
    # The agent and version that ran the turn, the workspace it bills, and the credits the
    # turn states (> 0: a row of ``credit_ledger`` written by the same save statement).
    agent_id: str | None = None
    agent_version: int | None = None
    workspace: str | None = None
    credits: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumedInput:
    """One record a burst turn consumed besides its last: where it came from and its id."""

    source: SourceRecord | None
    input_id: str | None = None


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A record to publish after the save commits: `payload` goes to `topic` under `key`."""

    topic: str
    key: str | None
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SaveRequest:
    """Everything one turn writes: the new session state, its turn-log row, its outbox rows.

    `expected_version` is the version the turn was computed from (0 for a new session); the
    saved session gets `expected_version + 1`.
    """

    session_id: str
    expected_version: int
    state: dict[str, Any]
    turn: TurnRecord
    outbox: list[OutboxEntry] = field(default_factory=list)
    # The W3C trace context of the turn (None when tracing is off): stored on each of its
    # outbox rows, so whoever sends them later sends them in this turn's trace, and its trace
    # id on the turn-log row.
    traceparent: str | None = None
    tracestate: str | None = None


@dataclass(frozen=True, slots=True)
class SavedTurn:
    """The committed version and the ids of the outbox rows, in write order.

    `history` is the history entries the turn gave (its `turns.history`, as the database built
    them), decoded as a load decodes them: the consumer appends them to the window it holds, so
    its next turn needs no history from the load. None when the store did not say (a double)."""

    version: int
    outbox_ids: list[int]
    history: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """What a turn asks of its load: the session, and the source records and input ids (all of
    a burst's) whose presence in the turn log makes it a replay or a duplicate.

    `history_version` is the session version whose history the caller already holds: when the
    session is still at that version the load leaves the history out (`history_held`)."""

    session_id: str
    sources: tuple[SourceRecord, ...] = ()
    input_ids: tuple[str, ...] = ()
    history_version: int | None = None


@dataclass(frozen=True, slots=True)
class LoadedSession:
    """A session as stored: `state` None and `version` 0 when it does not exist yet.

    `history` is engine.md's transcript, oldest first: `{"role", "text", "at"}` entries.
    `applied` says whether the source record the load was asked about is already in the turn
    log (a replay); `duplicate` whether the input id it was asked about is (the same input
    re-produced at another offset); `unpublished` counts the session's outbox rows not yet
    published. Asked about several records and ids (a burst), `applied_sources` and
    `duplicate_ids` say which of them the log already has, and `applied`/`duplicate` are true
    only when all of them are. `history_held` says the session is at the `history_version`
    the load was asked with, so `history` was left out (empty): the caller holds it.
    `history_json` is the history as the JSON text the database sent, when the load was asked
    for it as text (`Store.load_many(..., history_as_text=True)`); `history` is then empty.
    """

    state: dict[str, Any] | None
    version: int
    history: list[dict[str, Any]]
    applied: bool = False
    unpublished: int = 0
    duplicate: bool = False
    applied_sources: frozenset[SourceRecord] = frozenset()
    duplicate_ids: frozenset[str] = frozenset()
    history_held: bool = False
    history_json: str | None = None


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """An unpublished outbox row, as fetched by a publisher."""

    id: int
    session_id: str
    topic: str
    key: str | None
    payload: dict[str, Any]
    created_at: datetime
    # The trace context of the turn that wrote the row (None: it was written untraced).
    traceparent: str | None = None
    tracestate: str | None = None


@dataclass(frozen=True, slots=True)
class TimerEntry:
    """A timer to set: fire `key` for `session_id` at `at`; `replaces` names a key to delete."""

    key: str
    session_id: str
    at: datetime
    replaces: str | None = None
    # The trace context of the turn that set it (from its schedule record's headers).
    traceparent: str | None = None
    tracestate: str | None = None


@dataclass(frozen=True, slots=True)
class Timer:
    """A stored timer; `traceparent`/`tracestate` are the context of the turn that set it."""

    key: str
    session_id: str
    at: datetime
    traceparent: str | None = None
    tracestate: str | None = None


@dataclass(frozen=True, slots=True)
class LoggedTurn:
    """One turn-log row as a replay reads it; the list fields as `TurnRecord`'s.

    `clock_at` is None for turns saved before the engine's clock was kept (a replay then falls
    back to `created_at`); `model_calls` is None when nothing was recorded or it was pruned.
    `agent_id` and `agent_version` name what answered (a registry agent's version; None for
    rows saved before they were kept, and no version for an agent loaded from ``AGENT``).
    """

    session_id: str
    version: int
    input: dict[str, Any]
    messages: list[dict[str, Any]]
    schedule: list[dict[str, Any]]
    outcomes: list[dict[str, Any]]
    started: list[dict[str, Any]]
    ended: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    llm_calls: int
    created_at: datetime
    clock_at: datetime | None = None
    model_calls: dict[str, Any] | None = None
    agent_id: str | None = None
    agent_version: int | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterWords:
    """What a dead-lettered record said about its customer, kept beside its source for the
    inspector: the message text, the input id, the record key and the reason's detail, each
    already bounded and escaped by the consumer (None where nothing could be read)."""

    message: str | None = None
    input_id: str | None = None
    key: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    """A record kept in full because it cannot travel whole (see `store.dead_letters`).

    `source` identifies it once ("topic:partition:offset" of an input, "outbox:<id>" of an
    outbox row); `topic` is where it was headed; `headers` are the record's own, in order.
    """

    source: str
    topic: str
    reason: str
    detail: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
