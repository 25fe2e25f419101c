"""A search's results as the pages and the terminal show them: one hit a line, each naming the
conversation, the turn (or the dead letter, or the conversation's data), where the text was
found and the words around it.

The database finds the rows (``reading.Reader.search``, through trigram indexes); this module
only says, for each row, which of its parts holds the text, so an operator sees why it matched.
Plain data in, plain data out, like ``view``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consumer.inspect.reading import SearchResults
from consumer.inspect.view import dead_letter

__all__ = ["Hit", "search_hits"]

AROUND = 60
"""Characters of context shown on each side of the match."""


@dataclass(frozen=True)
class Hit:
    """One row that holds the searched text."""

    session_id: str  # "" for a dead-lettered record that names no conversation
    version: int | None  # the turn, None for a conversation's data or a dead letter
    at: datetime | None
    where: str  # customer, agent, input id, record key, source record, data, dead letter
    text: str  # the words around the match


def _excerpt(text: str, query: str) -> str | None:
    """``text`` around the first match of ``query`` (case-insensitive), or None."""
    at = text.casefold().find(query.casefold())
    if at < 0:
        return None
    start, end = max(0, at - AROUND), min(len(text), at + len(query) + AROUND)
    flat = " ".join(text[start:end].split())
    return ("…" if start else "") + flat + ("…" if end < len(text) else "")


def _turn_hit(turn: dict[str, Any], query: str) -> Hit:
    given = turn.get("input") or {}
    places: list[tuple[str, str]] = []
    if isinstance(given.get("message"), str):
        places.append(("customer", given["message"]))
    for part in given.get("burst") or []:
        if isinstance(part, dict) and isinstance(part.get("message"), str):
            places.append(("customer", part["message"]))
    for message in turn.get("messages") or []:
        if isinstance(message, dict):
            places.append(("agent", str(message.get("text") or "")))
            places.append(("message key", str(message.get("key") or "")))
    places.append(("input id", str(turn.get("input_id") or "")))
    if turn.get("source_topic"):
        places.append(("source record", f"{turn['source_topic']}:{turn['source_partition']}:"
                                        f"{turn['source_offset']}"))
    places.append(("input", json.dumps(given, ensure_ascii=False, sort_keys=True)))
    # the first part that holds it; else it matched the stored JSON's escapes only
    where, found = next(
        ((place, excerpt) for place, text in places
         if (excerpt := _excerpt(text, query)) is not None),
        ("input", ""),
    )
    return Hit(session_id=str(turn["session_id"]), version=int(turn["version"]),
               at=turn.get("created_at"), where=where, text=found)


def search_hits(results: SearchResults) -> list[Hit]:
    """Every row the search found as a hit: turns, then conversations' data, then dead
    letters, each most recent first."""
    query = results.query
    hits = [_turn_hit(t, query) for t in results.turns]
    for session in results.sessions:
        data = (session.get("state") or {}).get("data") or {}
        text = json.dumps(data, ensure_ascii=False, sort_keys=True)
        hits.append(Hit(session_id=str(session["id"]), version=None,
                        at=session.get("updated_at"), where="data",
                        text=_excerpt(text, query) or ""))
    for row in results.dead_letters:
        letter = dead_letter(row)
        text = " ".join(str(letter.get(k) or "") for k in
                        ("message", "input_id", "key", "session_id", "source"))
        hits.append(Hit(session_id=letter["session_id"], version=None, at=letter["at"],
                        where="dead letter", text=_excerpt(text, query) or ""))
    return hits
