"""Compaction (engine.md §8): keep the history sent to the model under ``max_chars``.

Code layers first, in Load: drop tool chatter, trim long entries, keep the last ``keep_last``.
Only when that is still over ``max_chars`` and ``summarize`` is set does one ``compact`` call
write a summary that replaces the dropped head. That call is made right before the turn's first
model call, so a turn that calls nothing spends nothing; it counts in ``llm_calls``. The summary
lives in ``session.metadata["compaction"]`` with the history position it covers, and later turns
reuse it until the part it does not cover grows past ``max_chars`` again.
"""

from __future__ import annotations

from typing import Any

from engine.errors import MockExhausted
from engine.providers.base import ChatMessage, ModelRequest
from engine.request import HistoryEntry
from engine.state import PendingSummary, TurnState

SUMMARY_PREFIX = "[Summary of the earlier conversation] "
SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": ["string", "null"]}},
    "required": ["summary"],
    "additionalProperties": False,
}


def _chars(entries: list[HistoryEntry]) -> int:
    return sum(len(e.text) for e in entries)


def trim(state: TurnState) -> None:
    """The code layers; leaves a ``PendingSummary`` on the state when a call is needed."""
    config = state.config.compaction
    assert config is not None
    cut = config.trim_entry_chars
    entries = [
        (pos, e if len(e.text) <= cut else e.model_copy(update={"text": e.text[:cut]}))
        for pos, e in enumerate(state.history)
        if e.role != "tool"
    ]
    entries = entries[-config.keep_last :]
    if _chars([e for _, e in entries]) <= config.max_chars:
        state.history = [e for _, e in entries]
        return
    while len(entries) > 1 and _chars([e for _, e in entries]) > config.max_chars:
        entries = entries[1:]
    first = entries[0][0]
    kept = [e for _, e in entries]
    dropped = [e for pos, e in enumerate(state.history[:first]) if e.role != "tool"]
    state.history = kept
    if not config.summarize:
        return
    stored = state.session.metadata.get("compaction")
    stored = stored if isinstance(stored, dict) else {}
    previous = stored.get("summary")
    covered = int(stored.get("covers", 0))
    covered_at = stored.get("covers_at")
    if isinstance(covered_at, str):
        # Hosts often pass a window of the transcript, so positions shift between turns; the
        # time of the last summarized entry says what the summary covers when entries have one.
        uncovered = [e for e in dropped if e.at is None or e.at.isoformat() > covered_at]
        still_valid = True
    else:
        uncovered = [
            e
            for pos, e in enumerate(state.request.history[:first])
            if pos >= covered and e.role != "tool"
        ]
        still_valid = covered <= first
    if isinstance(previous, str) and still_valid and _chars(uncovered) <= config.max_chars:
        state.history = [_summary_entry(previous), *uncovered, *kept]
        return
    state.compaction_pending = PendingSummary(dropped=dropped, covers=first, previous=previous)


def _summary_entry(text: str) -> HistoryEntry:
    return HistoryEntry(role="assistant", text=SUMMARY_PREFIX + text)


async def summarize(state: TurnState) -> None:
    """Make the one summary call, if the code layers left one to make (counts in llm_calls)."""
    pending = state.compaction_pending
    if pending is None or state.config.provider is None:
        return
    state.compaction_pending = None
    messages = []
    if pending.previous:
        messages.append(ChatMessage(role="assistant", text=SUMMARY_PREFIX + pending.previous))
    messages += [ChatMessage(role=e.role, text=e.text) for e in pending.dropped]
    request = ModelRequest(
        schema_name="compact",
        system=(
            "Summarize the conversation so far in a few sentences: who the customer is, what "
            "they asked for, what was agreed and what is still open. Answer with JSON "
            '{"summary": "..."}.'
        ),
        messages=messages,
        json_schema=SUMMARY_SCHEMA,
        meta={"entries": len(pending.dropped)},
    )
    state.llm_calls += 1
    try:
        response = await state.config.provider.generate(request)
    except MockExhausted:
        raise  # a scripted test spent one call too many: fail loudly
    except Exception:  # a failed summary (ProviderError or other) leaves the code layers' history
        state.outcome("compaction-failed")
        return
    summary = (response.json or {}).get("summary") if response.json else None
    text = summary if isinstance(summary, str) and summary.strip() else response.text.strip()
    if not text:
        return
    last = pending.dropped[-1].at if pending.dropped else None
    state.session.metadata["compaction"] = {
        "summary": text,
        "covers": pending.covers,
        "covers_at": last.isoformat() if last is not None else None,
    }
    state.history = [_summary_entry(text), *state.history]
