"""The inspector's queries: paged, read-only, over the tables the consumer writes.

Every read runs in a ``READ ONLY`` transaction, so the inspector cannot write even when it is
given a role that could (docs/inspecting.md describes a read-only role as well). Nothing here
loads a table or a conversation whole:

- the conversation list is a keyset page over ``sessions`` by last activity
  (``ix_sessions_updated``); filtered by an incident kind it reads only the turns of that kind
  from the partial index ``ix_turns_incidents`` (``store.incidents``), grouped by conversation;
- a conversation is read as a range of turn versions (versions are dense, one per saved turn),
  with the session's unpublished outbox rows, its pending timers and its dead-lettered inputs,
  each from an index on the session.

The SQL is composed only from the fixed fragments below; every value is a bound parameter.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from store import jsoncodec
from store.erasure import erased_at
from store.incidents import KINDS
from store.pooler import Pooler, engine_options
from store.search_text import (
    DEAD_LETTER_TEXT,
    SESSION_TEXT,
    TURN_TEXT,
    TURN_WORDS,
    like_pattern,
)
from store.turn_log import RECORDING
from store.urls import async_url

__all__ = [
    "DEAD_LETTERED",
    "DEAD_LETTER_COLUMNS",
    "MIN_SEARCH",
    "OUTCOME_FILTERS",
    "ConversationRows",
    "Cursor",
    "ListFilter",
    "ListRow",
    "Reader",
    "SearchResults",
]

DEAD_LETTERED = "dead-lettered"
OUTCOME_FILTERS = (*KINDS, DEAD_LETTERED)
"""The ``--outcome`` values: the incident kinds of ``store.incidents`` and dead-lettered inputs."""

MAX_PAGE = 500
"""The largest page any caller may ask for (conversations or turns)."""

_TURN_COLUMNS = f"""
    id, session_id, version, input, messages, schedule, outcomes, started, ended, skipped,
    llm_calls, created_at, clock_at, {RECORDING} AS model_calls, input_id, source_topic,
    source_partition, source_offset, agent_id, agent_version, trace_id
"""

PAGE_TURNS = text(
    f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_id = :s"
    " AND created_at >= coalesce(CAST(:since AS timestamptz), '-infinity')"
    " AND version BETWEEN :lo AND :hi ORDER BY version"
)
"""A page of a conversation's turns. The turn log is partitioned by month (store/partitions.py):
bounded by the session's ``turns_since`` (no turn of it is older), the months before it began
are not read."""

SEARCH_TURNS = text(
    f"SELECT {_TURN_COLUMNS} FROM turns WHERE {TURN_WORDS} @@ plainto_tsquery('simple', :q)"
    f" AND {TURN_TEXT} ILIKE :p ORDER BY created_at DESC, id DESC LIMIT :n"
)
"""The turns holding a searched text: every month, each through its index of the turns' words
(store/search_text.py), then the text as typed."""


DEAD_LETTER_COLUMNS = (
    "id, session_id, source_topic, source_partition, source_offset, reason, created_at, "
    "message, input_id, record_key, detail"
)
"""What is read of a dead-lettered record: its source, reason and what it said."""


@dataclass(frozen=True)
class Cursor:
    """Where a list page ends: the last row's activity time and id (the next page is after)."""

    at: datetime
    session_id: str

    def encode(self) -> str:
        raw = json.dumps([self.at.isoformat(), self.session_id]).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, value: str) -> Cursor:
        """The cursor ``encode`` gave; a ValueError for anything else (it comes from a URL)."""
        try:
            padded = value + "=" * (-len(value) % 4)
            at, session_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
            parsed = datetime.fromisoformat(at)
        except (ValueError, TypeError, UnicodeError) as exc:
            raise ValueError("not a page cursor") from exc
        if not isinstance(session_id, str) or parsed.tzinfo is None:
            raise ValueError("not a page cursor")
        return cls(parsed, session_id)


MAX_TEXT_CHARS = 1_000
"""The longest session id, flow or agent name a caller may ask about."""


def storable(value: str) -> bool:
    """Whether a ``text`` column can hold ``value`` (no NUL, valid UTF-8, not overlong): a
    value that cannot be stored names nothing stored, and would only make the query fail."""
    if "\x00" in value or len(value) > MAX_TEXT_CHARS:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, e.g. from undecodable argv bytes
        return False
    return True


@dataclass(frozen=True)
class ListFilter:
    """What the conversation list is narrowed to. ``outcome`` is one of ``OUTCOME_FILTERS``;
    ``since``/``until`` bound the last activity (or, with ``outcome``, the matching turns)."""

    outcome: str | None = None
    flow: str | None = None
    agent: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for name in ("flow", "agent"):
            value = getattr(self, name)
            if value is not None and not storable(value):
                raise ValueError(
                    f"{name}: not a name (a NUL, an invalid character, or over "
                    f"{MAX_TEXT_CHARS} characters)"
                )
        if self.outcome is not None and self.outcome not in OUTCOME_FILTERS:
            raise ValueError(
                f"unknown outcome {self.outcome!r}: one of {', '.join(OUTCOME_FILTERS)}"
            )


@dataclass(frozen=True)
class ListRow:
    """One conversation of a list page, with what the list shows of it."""

    session_id: str
    turns: int
    created_at: datetime
    updated_at: datetime
    at: datetime  # the ordering key: last activity, or the last matching turn when filtered
    state: dict[str, Any]
    last_input: dict[str, Any] | None = None
    incidents: list[str] = field(default_factory=list)
    dead_lettered: int = 0
    dead_reason: str | None = None  # the last dead-lettered input's reason and message text
    dead_message: str | None = None
    handoff_reason: str | None = None  # the last hand-off's reason (its line's detail)


@dataclass(frozen=True)
class ConversationRows:
    """What a conversation page is built from: the session row, one range of its turns, and
    what is still pending for it."""

    session: dict[str, Any]
    turns: list[dict[str, Any]]
    unpublished: list[dict[str, Any]]
    timers: list[dict[str, Any]]
    dead_lettered: list[dict[str, Any]]
    first_version: int
    last_version: int


# The startup settings' `jit = off`, set in each transaction where a transaction-mode pooler
# keeps startup settings from the server (`Reader`).
_NO_JIT = text("SET LOCAL jit = off")

MIN_SEARCH = 3
"""The shortest search: a trigram index finds nothing shorter than three characters."""


@dataclass(frozen=True)
class SearchResults:
    """What a search found: turns (rows as ``ConversationRows.turns``), conversations whose
    data holds the text (session rows), dead-lettered records (``DEAD_LETTER_COLUMNS``)."""

    query: str
    turns: list[dict[str, Any]]
    sessions: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]


class Reader:
    """The inspector's connection to the database: read-only transactions on a small pool."""

    def __init__(
        self, database_url: str, *, pool_size: int = 4, pooler: Pooler = "none"
    ) -> None:
        # Every transaction of these connections is read-only, even a statement run outside
        # an explicit one (the server refuses any write), on top of the role's own grants.
        # Through a transaction-mode pooler (``pooler``, store/pooler.py) these startup
        # settings cannot reach the pooled server connections: every read is then a read-only
        # transaction that sets them with SET LOCAL (`_reading`).
        self._pooled = pooler != "none"
        self._engine: AsyncEngine = create_async_engine(
            async_url(database_url), pool_size=pool_size, max_overflow=0,
            hide_parameters=True,  # an error's text never carries a session id or a filter
            **engine_options(pooler, {"server_settings": {
                "default_transaction_read_only": "on",
                "application_name": "turnflow-inspect",
                # No JIT: on a log of millions of turns the planner's cost of a search over
                # every month passes ``jit_above_cost`` and PostgreSQL compiled the query's
                # expressions for each call (72 ms of a 114 ms search at 10,000,000 turns)
                # to run index scans that take under a millisecond.
                "jit": "off",
            }}),
        )

    async def close(self) -> None:
        await self._engine.dispose()

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction over one snapshot, for a page of several statements."""
        async with self._engine.connect() as plain:
            connection = await plain.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
            async with connection.begin():
                if self._pooled:
                    await connection.execute(_NO_JIT)
                yield connection

    @asynccontextmanager
    async def _statement(self) -> AsyncIterator[AsyncConnection]:
        """For a page read by one statement: no BEGIN and COMMIT round trips around it; the
        statement is its own transaction, read-only by the connection's default. Through a
        transaction-mode pooler the connection has no such default: a read-only transaction
        (`_reading`) instead."""
        if self._pooled:
            async with self._reading() as connection:
                yield connection
            return
        async with self._engine.connect() as plain:
            yield await plain.execution_options(isolation_level="AUTOCOMMIT")

    # -- the list ----------------------------------------------------------------------------

    async def conversations(
        self, where: ListFilter, *, limit: int = 50, after: Cursor | None = None
    ) -> tuple[list[ListRow], Cursor | None]:
        """A page of conversations, most recent first, and the cursor of the next page (None
        when this is the last)."""
        limit = max(1, min(limit, MAX_PAGE))
        sql, params = _list_query(where, limit + 1, after)
        async with self._statement() as connection:
            rows = (await connection.execute(text(sql), params)).mappings().all()
        more = len(rows) > limit
        out = [
            ListRow(
                session_id=r["id"], turns=int(r["version"]), created_at=r["created_at"],
                updated_at=r["updated_at"], at=r["at"], state=_json(r["state"]) or {},
                last_input=_json(r["last_input"]),
                incidents=[name for name in KINDS if r[f"is_{name}"]],
                dead_lettered=int(r["dead_lettered"] or 0),
                dead_reason=r["dead_reason"], dead_message=r["dead_message"],
                handoff_reason=r["handoff_reason"],
            )
            for r in rows[:limit]
        ]
        following = Cursor(out[-1].at, out[-1].session_id) if more and out else None
        return out, following

    # -- one conversation ---------------------------------------------------------------------

    async def conversation(
        self,
        session_id: str,
        *,
        turns: int = 50,
        from_version: int | None = None,
        since: datetime | None = None,
    ) -> ConversationRows | None:
        """The session and a range of ``turns`` of its turns, oldest first: from
        ``from_version``, else from the first turn at or after ``since``, else the last
        ``turns`` turns. None when there is no such conversation (no session row and no
        dead-lettered input)."""
        turns = max(1, min(turns, MAX_PAGE))
        if not storable(session_id):
            return None
        async with self._reading() as connection:
            session = (await connection.execute(text(
                "SELECT id, version, state, created_at, updated_at, turns_since FROM sessions"
                " WHERE id = :s"
            ), {"s": session_id})).mappings().first()
            dead = [dict(r) for r in (await connection.execute(text(
                f"SELECT {DEAD_LETTER_COLUMNS} "
                "FROM dead_lettered_sources WHERE session_id = :s ORDER BY created_at, id "
                "LIMIT :n"
            ), {"s": session_id, "n": MAX_PAGE})).mappings().all()]
            if session is None and not dead:
                return None
            last = int(session["version"]) if session is not None else 0
            if from_version is not None:
                first = max(1, from_version)
            elif since is not None:
                found = (await connection.execute(text(
                    "SELECT version FROM turns WHERE session_id = :s AND created_at >= :since "
                    "ORDER BY version LIMIT 1"
                ), {"s": session_id, "since": since})).scalar()
                first = int(found) if found is not None else last + 1
            else:
                first = max(1, last - turns + 1)
            upto = min(last, first + turns - 1)
            rows = (await connection.execute(PAGE_TURNS, {
                "s": session_id, "lo": first, "hi": upto,
                "since": session["turns_since"] if session is not None else None,
            })).mappings().all()
            unpublished = (await connection.execute(text(
                "SELECT id, topic, key, payload, created_at FROM outbox "
                "WHERE session_id = :s AND published_at IS NULL ORDER BY id LIMIT :n"
            ), {"s": session_id, "n": MAX_PAGE})).mappings().all()
            timers = (await connection.execute(text(
                "SELECT key, at FROM timers WHERE session_id = :s ORDER BY at, key LIMIT :n"
            ), {"s": session_id, "n": MAX_PAGE})).mappings().all()
        return ConversationRows(
            session={
                "id": session_id,
                "version": last,
                "state": _json(session["state"]) if session is not None else {},
                "created_at": session["created_at"] if session is not None else None,
                "updated_at": session["updated_at"] if session is not None else None,
            },
            turns=[_turn(r) for r in rows],
            unpublished=[
                {**dict(r), "payload": _json(r["payload"])} for r in unpublished
            ],
            timers=[dict(r) for r in timers],
            dead_lettered=dead,
            first_version=first,
            last_version=upto,
        )

    async def erased_at(self, session_id: str) -> datetime | None:
        """When the conversation ``session_id`` was erased (``turnflow erase``), or None: what
        the inspector says instead of "no such conversation" for an erased one."""
        return await erased_at(self._engine, session_id)

    async def dead_letters(
        self, *, limit: int = 50, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """A page of dead-lettered records, most recent first (a keyset page by row id), and
        the id to read the next page before (None when this is the last)."""
        limit = max(1, min(limit, MAX_PAGE))
        async with self._statement() as connection:
            rows = (await connection.execute(text(
                f"SELECT {DEAD_LETTER_COLUMNS} FROM dead_lettered_sources "
                "WHERE (CAST(:before AS bigint) IS NULL OR id < :before) "
                "ORDER BY id DESC LIMIT :n"
            ), {"before": before, "n": limit + 1})).mappings().all()
        out = [dict(r) for r in rows[:limit]]
        return out, (int(out[-1]["id"]) if len(rows) > limit and out else None)

    async def search(self, query: str, *, limit: int = 50) -> SearchResults:
        """The turns, conversations (by the data they hold) and dead-lettered records whose
        searchable text (``store.search_text``) holds ``query``, case-insensitively, most
        recent first, at most ``limit`` of each. Each table is read through its trigram index;
        a query shorter than ``MIN_SEARCH`` characters has no trigram and is refused."""
        if len(query.strip()) < MIN_SEARCH or not storable(query):
            raise ValueError(
                f"search for at least {MIN_SEARCH} characters (no NUL, at most "
                f"{MAX_TEXT_CHARS})"
            )
        limit = max(1, min(limit, MAX_PAGE))
        params = {"p": like_pattern(query.strip()), "q": query.strip(), "n": limit}
        async with self._reading() as connection:
            turns = (await connection.execute(SEARCH_TURNS, params)).mappings().all()
            sessions = (await connection.execute(text(
                "SELECT id, version, state, created_at, updated_at FROM sessions "
                f"WHERE {SESSION_TEXT} ILIKE :p ORDER BY updated_at DESC, id DESC LIMIT :n"
            ), params)).mappings().all()
            letters = (await connection.execute(text(
                f"SELECT {DEAD_LETTER_COLUMNS} FROM dead_lettered_sources "
                f"WHERE {DEAD_LETTER_TEXT} ILIKE :p ORDER BY id DESC LIMIT :n"
            ), params)).mappings().all()
        return SearchResults(
            query=query.strip(),
            turns=[_turn(r) for r in turns],
            sessions=[{**dict(r), "state": _json(r["state"]) or {}} for r in sessions],
            dead_letters=[dict(r) for r in letters],
        )

    async def outcome_lines(
        self, session_id: str, *, limit: int = 1_000
    ) -> list[list[dict[str, Any]]]:
        """The outcome lines of the conversation's last ``limit`` turns, oldest turn first
        (``view.path`` reads the path through the flows from them). Only that column is read."""
        limit = max(1, min(limit, 10_000))
        if not storable(session_id):
            return []
        async with self._statement() as connection:
            rows = (await connection.execute(text(
                "SELECT outcomes FROM (SELECT version, outcomes FROM turns WHERE session_id = :s "
                "ORDER BY version DESC LIMIT :n) AS t ORDER BY version"
            ), {"s": session_id, "n": limit})).scalars().all()
        return [_json(outcomes) or [] for outcomes in rows]


def _json(value: Any) -> Any:
    """A jsonb value as the driver gave it (text with asyncpg), decoded."""
    if value is None or not isinstance(value, str | bytes):
        return value
    return jsoncodec.loads(value)


def _turn(row: Any) -> dict[str, Any]:
    out = dict(row)
    for name in ("input", "messages", "schedule", "outcomes", "started", "ended", "skipped",
                 "model_calls"):
        out[name] = _json(out[name])
    return out


def _list_query(
    where: ListFilter, limit: int, after: Cursor | None
) -> tuple[str, dict[str, Any]]:
    """The list page's SQL: composed of fixed fragments only, the values bound.

    Unfiltered, the page walks ``sessions`` by last activity (``ix_sessions_updated``). By an
    outcome, it groups the matching turns (from that kind's own index) or dead-lettered inputs
    by conversation, takes the page of them, and only then reads those conversations' rows."""
    params: dict[str, Any] = {"limit": limit}
    conditions: list[str] = []
    if where.outcome is None:
        sid, at = "s.id", "s.updated_at"
        if where.since is not None:
            conditions.append("s.updated_at >= :since")
        if where.until is not None:
            conditions.append("s.updated_at < :until")
    else:
        sid, at = "m.session_id", "m.at"
        table = "dead_lettered_sources" if where.outcome == DEAD_LETTERED else "turns"
        bounds = [] if where.outcome == DEAD_LETTERED else [KINDS[where.outcome]]
        if where.since is not None:
            bounds.append("created_at >= :since")
        if where.until is not None:
            bounds.append("created_at < :until")
        matching = (
            f"SELECT session_id, max(created_at) AS at FROM {table}"
            + (" WHERE " + " AND ".join(bounds) if bounds else "")
            + " GROUP BY session_id"
        )
    if where.since is not None:
        params["since"] = where.since
    if where.until is not None:
        params["until"] = where.until
    if after is not None:
        conditions.append(f"({at}, {sid}) < (:after_at, :after_id)")
        params["after_at"], params["after_id"] = after.at, after.session_id
    if where.flow is not None:
        # a conversation that ran the flow: a turn started a run of it
        conditions.append(
            f"EXISTS (SELECT 1 FROM turns AS f WHERE f.session_id = {sid} "
            "AND f.started @> CAST(:flow AS jsonb))"
        )
        params["flow"] = json.dumps([{"flow_id": where.flow}])
    if where.agent is not None:
        # the registry agent that ran a turn, or the agent id its messages carry (an agent
        # loaded from AGENT has no registry id; its messages name it when it has lifecycle
        # settings)
        conditions.append(
            f"EXISTS (SELECT 1 FROM turns AS a WHERE a.session_id = {sid} "
            "AND (a.agent_id = :agent OR a.messages @> CAST(:agent_json AS jsonb)))"
        )
        params["agent"] = where.agent
        params["agent_json"] = json.dumps([{"agent_id": where.agent}])
    filtered = " WHERE " + " AND ".join(conditions) if conditions else ""
    if where.outcome is None:
        page = (
            "SELECT s.id, s.version, s.state, s.created_at, s.updated_at, s.updated_at AS at"
            f" FROM sessions AS s{filtered} ORDER BY s.updated_at DESC, s.id DESC LIMIT :limit"
        )
    else:
        # A conversation whose first input was dead-lettered has no session row yet: it is
        # listed all the same (no turns, its dead letter's time).
        page = (
            "SELECT m.session_id AS id, COALESCE(s.version, 0) AS version,"
            " COALESCE(s.state, '{}'::jsonb) AS state,"
            " COALESCE(s.created_at, m.at) AS created_at,"
            " COALESCE(s.updated_at, m.at) AS updated_at, m.at FROM ("
            f"SELECT m.session_id, m.at FROM ({matching}) AS m{filtered}"
            " ORDER BY m.at DESC, m.session_id DESC LIMIT :limit"
            ") AS m LEFT JOIN sessions AS s ON s.id = m.session_id"
        )

    # What the list shows of each conversation of the page, read for those rows only, each
    # through an index on the session: its last input, the incident kinds of its turns, its
    # dead-lettered inputs. One statement, so one round trip.
    # Each kind's test is its partial index's own predicate, so each is one index probe.
    kinds = ", ".join(
        f'EXISTS (SELECT 1 FROM turns AS k WHERE k.session_id = p.id AND {sql}) AS "is_{name}"'
        for name, sql in KINDS.items()
    )
    sql = (
        f"SELECT p.*, lt.input AS last_input, {kinds}, dead.n AS dead_lettered,"
        " lastdead.reason AS dead_reason, lastdead.message AS dead_message,"
        f" ho.reason AS handoff_reason FROM ({page}) AS p"
        # the last customer message (wakes, events and starts are not what a person reads)
        " LEFT JOIN LATERAL (SELECT input FROM turns WHERE session_id = p.id"
        " AND input ? 'message' ORDER BY version DESC LIMIT 1) AS lt ON true"
        # why the last hand-off to a person happened: its line's detail (keyword, max_turns)
        " LEFT JOIN LATERAL (SELECT o.value ->> 'detail' AS reason FROM turns AS h,"
        " jsonb_array_elements(h.outcomes) AS o WHERE h.session_id = p.id"
        f" AND {KINDS['handoff']}"
        """ AND o.value @> '{"code": "handoff", "run_id": null}'"""
        " ORDER BY h.version DESC LIMIT 1) AS ho ON true"
        " LEFT JOIN LATERAL (SELECT count(*) AS n FROM dead_lettered_sources"
        " WHERE session_id = p.id) AS dead ON true"
        " LEFT JOIN LATERAL (SELECT reason, message FROM dead_lettered_sources"
        " WHERE session_id = p.id ORDER BY created_at DESC, id DESC LIMIT 1) AS lastdead ON true"
        " ORDER BY p.at DESC, p.id DESC"
    )
    return sql, params
