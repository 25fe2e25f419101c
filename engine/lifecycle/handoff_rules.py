"""The hand-off rules, judged by code on a customer message before any model call.

Checked in this order, the first that fires wins: a hand-off keyword in the message,
``max_turns`` (the agent already answered that many customer messages), then
``max_consecutive_fallbacks`` (that many fallback turns in a row). Keywords match whole words
(or whole phrases), ignoring case and accents, so "human" does not fire on "humanity".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from engine.lifecycle.knowledge import fold
from engine.lifecycle.results import HandoffNotice
from engine.lifecycle.settings import HandoffRules, LifecycleMemory


def keyword_in(message: str, keywords: Iterable[str]) -> str | None:
    """The first keyword the message contains as whole words, or None."""
    text = fold(message)
    for keyword in keywords:
        wanted = fold(keyword).strip()
        if wanted and re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", text):
            return keyword
    return None


def rule_fired(
    rules: HandoffRules, message: str, memory: LifecycleMemory
) -> HandoffNotice | None:
    """The hand-off a rule calls for on this message (``memory`` as before this message)."""
    keyword = keyword_in(message, rules.keywords)
    if keyword is not None:
        return HandoffNotice(
            reason="keyword", summary=f"The customer wrote {keyword!r}.", tag=rules.tag
        )
    if rules.max_turns is not None and memory.turns >= rules.max_turns:
        return HandoffNotice(
            reason="max_turns",
            summary=f"The agent answered {memory.turns} messages, its limit.",
            tag=rules.tag,
        )
    limit = rules.max_consecutive_fallbacks
    if limit is not None and memory.consecutive_fallbacks >= limit:
        return HandoffNotice(
            reason="max_consecutive_fallbacks",
            summary=f"The agent could not answer {memory.consecutive_fallbacks} times in a row.",
            tag=rules.tag,
        )
    return None
