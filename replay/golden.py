"""Golden files: conversations as plain JSON files an agent's repository can commit.

One file per conversation, written by ``turnflow replay export`` and read by
``turnflow replay --from DIR`` and ``replay.pytest.assert_replays`` with no database::

    {"format": "turnflow-replay", "version": 1, "session_id": "s-42",
     "turns": [{"version": 1, "at": "2026-03-02T10:00:00Z", "logged_at": "...",
                "input": {"message": "hi", "id": "m1"},
                "calls": [{"kind": "understand", "ok": true, "reply": {"json": {...}}}],
                "recorded": {"messages": [...], "schedule": [...], "outcomes": [...],
                             "started": [...], "ended": [...], "skipped": [...],
                             "llm_calls": 1, "fields": {"name": "Rita"},
                             "state": "<digest of the state the turn left>"}}]}

``calls`` and ``fields`` are null when they were not recorded, and ``state`` is left out.
A turn answered by an agent from the registry also names it: ``"agent_id"`` and
``"agent_version"`` (the version that ran it), so a replay can rebuild exactly that version.
A file is named after its session id (``walk-1.json``); an id a file name cannot carry as it
is gets a safe name and a short hash of the id. A file is outside input: reading one either
gives a ``Conversation`` or raises ``GoldenFileError`` naming the file and what is wrong with
it, never quoting its content.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.clock import to_utc
from replay.conversations import Conversation, Recorded, RecordedTurn, iso

__all__ = [
    "FORMAT",
    "GoldenFileError",
    "file_name",
    "golden_json",
    "parse_golden",
    "read_directory",
    "write_golden",
]

FORMAT = "turnflow-replay"
VERSION = 1
MAX_FILE_BYTES = 64 * 1024 * 1024


class GoldenFileError(ValueError):
    """A golden file that cannot be read; the message names the file and the problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Recorded(_Strict):
    messages: list[dict[str, Any]] = Field(default_factory=list)
    schedule: list[dict[str, Any]] = Field(default_factory=list)
    outcomes: list[dict[str, Any]] = Field(default_factory=list)
    started: list[dict[str, Any]] = Field(default_factory=list)
    ended: list[dict[str, Any]] = Field(default_factory=list)
    skipped: list[dict[str, Any]] = Field(default_factory=list)
    llm_calls: int = Field(0, ge=0)
    fields: dict[str, Any] | None = None
    state: str | None = Field(None, max_length=128)


class _Turn(_Strict):
    version: int = Field(ge=1)
    at: datetime
    logged_at: datetime | None = None
    input: dict[str, Any]
    calls: list[dict[str, Any]] | None = None
    spoke_at: datetime | None = None
    agent_id: str | None = None
    agent_version: int | None = Field(None, ge=1)
    recorded: _Recorded


class _File(_Strict):
    format: Literal["turnflow-replay"]
    version: Literal[1]
    session_id: str = Field(min_length=1)
    turns: list[_Turn]


def golden_json(conversation: Conversation) -> dict[str, Any]:
    """The golden file's content for ``conversation``."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "session_id": conversation.session_id,
        "turns": [
            {
                "version": turn.version,
                "at": iso(turn.at),
                "logged_at": iso(turn.logged_at),
                "input": {k: v for k, v in turn.input.items() if k != "session_id"},
                "calls": turn.calls,
                **({"spoke_at": iso(turn.spoke_at)} if turn.spoke_at is not None else {}),
                **({"agent_id": turn.agent_id} if turn.agent_id is not None else {}),
                **({"agent_version": turn.agent_version} if turn.agent_version is not None
                   else {}),
                "recorded": {
                    "messages": turn.recorded.messages,
                    "schedule": turn.recorded.schedule,
                    "outcomes": turn.recorded.outcomes,
                    "started": turn.recorded.started,
                    "ended": turn.recorded.ended,
                    "skipped": turn.recorded.skipped,
                    "llm_calls": turn.recorded.llm_calls,
                    "fields": turn.recorded.fields,
                    **({"state": turn.recorded.state} if turn.recorded.state is not None
                       else {}),
                },
            }
            for turn in conversation.turns
        ],
    }


def _where(error: dict[str, Any]) -> str:
    return ".".join(str(part) for part in error.get("loc", ())) or "the file"


def parse_golden(raw: bytes, *, name: str = "golden file") -> Conversation:
    """The conversation in ``raw``, or ``GoldenFileError`` saying what is wrong."""
    if len(raw) > MAX_FILE_BYTES:
        raise GoldenFileError(f"{name}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GoldenFileError(f"{name}: not UTF-8 (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GoldenFileError(f"{name}: not JSON (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise GoldenFileError(f"{name}: JSON nested too deeply") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GoldenFileError(f"{name}: not a turnflow replay file (format is not {FORMAT!r})")
    try:
        parsed = _File.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise GoldenFileError(f"{name}: {_where(dict(first))}: {first['msg']}") from None
    except RecursionError:
        raise GoldenFileError(f"{name}: JSON nested too deeply") from None
    turns = []
    for turn in parsed.turns:
        at = to_utc(turn.at)
        turns.append(
            RecordedTurn(
                version=turn.version,
                input={"session_id": parsed.session_id, **turn.input},
                at=at,
                logged_at=to_utc(turn.logged_at) if turn.logged_at else at,
                calls=turn.calls,
                recorded=Recorded(**turn.recorded.model_dump()),
                spoke_at=to_utc(turn.spoke_at) if turn.spoke_at is not None else None,
                agent_id=turn.agent_id,
                agent_version=turn.agent_version,
            )
        )
    versions = [t.version for t in turns]
    if versions != sorted(versions) or len(set(versions)) != len(versions):
        raise GoldenFileError(f"{name}: turn versions are not strictly increasing")
    return Conversation(session_id=parsed.session_id, turns=turns)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_name(session_id: str, *, hashed: bool = False) -> str:
    """The session's file name: its id, when the id is a safe file name as it is; otherwise
    (or when ``hashed``) the id made safe plus a short hash, so two ids that make the same safe
    name still get two files."""
    if not hashed and _SAFE_NAME.fullmatch(session_id) and session_id.lower() not in _RESERVED:
        return f"{session_id}.json"
    safe = _UNSAFE.sub("_", session_id).strip("._")[:80] or "session"
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:8]
    return f"{safe}~{digest}.json"


# An id kept as its own file name: the characters every file system takes, not hidden, not
# the directory names, short enough for any file system.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,79}")
_RESERVED = frozenset({"con", "prn", "aux", "nul"})


def write_golden(conversation: Conversation, directory: Path) -> Path:
    """Write ``conversation`` to ``directory`` (created if missing); returns the file. Where the
    id's own name is already taken by another session's file (``Walk-1`` and ``walk-1`` on a
    file system that ignores case), the hashed name is used instead."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(conversation.session_id)
    if path.exists() and _session_of(path) not in (None, conversation.session_id):
        path = directory / file_name(conversation.session_id, hashed=True)
    content = json.dumps(golden_json(conversation), indent=2, ensure_ascii=False, sort_keys=False)
    path.write_text(content + "\n", encoding="utf-8")
    return path


def _session_of(path: Path) -> str | None:
    """The session id a file already there holds; None when it holds none that can be read."""
    try:
        data = json.loads(path.read_bytes()[:MAX_FILE_BYTES])
    except (OSError, ValueError, RecursionError):
        return None
    session = data.get("session_id") if isinstance(data, dict) else None
    return session if isinstance(session, str) else None


def read_directory(directory: Path) -> list[Conversation]:
    """Every ``*.json`` golden file of ``directory``, by file name."""
    if not directory.is_dir():
        raise GoldenFileError(f"{directory}: not a directory")
    conversations = []
    for path in sorted(directory.glob("*.json")):
        conversations.append(parse_golden(path.read_bytes(), name=path.name))
    return conversations
