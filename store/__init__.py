"""Persistence of sessions, the turn log, the outbox and timers (PostgreSQL).

`Store` is the API; `store.migrate` runs the schema migrations; `store.embedded` starts a
local PostgreSQL for development and tests.
"""

from store.database import Store
from store.embedded import EmbeddedPostgres, start_embedded_postgres
from store.errors import (
    AlreadyApplied,
    DuplicateInput,
    EmbeddedServerError,
    StoreError,
    VersionConflict,
)
from store.outbox import OutboxBatch
from store.positions import DatabaseChanged, PositionsMoved
from store.records import (
    ConsumedInput,
    DeadLetterRecord,
    DeadLetterWords,
    LoadedSession,
    LoadRequest,
    LoggedTurn,
    OutboxEntry,
    OutboxRow,
    SavedTurn,
    SaveRequest,
    SourceRecord,
    Timer,
    TimerEntry,
    TurnRecord,
)
from store.timers import ClaimedTimers

__all__ = [
    "AlreadyApplied",
    "ClaimedTimers",
    "ConsumedInput",
    "DatabaseChanged",
    "DeadLetterRecord",
    "DeadLetterWords",
    "DuplicateInput",
    "EmbeddedPostgres",
    "EmbeddedServerError",
    "LoadRequest",
    "LoadedSession",
    "LoggedTurn",
    "OutboxBatch",
    "OutboxEntry",
    "OutboxRow",
    "PositionsMoved",
    "SaveRequest",
    "SavedTurn",
    "SourceRecord",
    "Store",
    "StoreError",
    "Timer",
    "TimerEntry",
    "TurnRecord",
    "VersionConflict",
    "start_embedded_postgres",
]
