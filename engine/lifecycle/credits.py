"""Step 8, bill: the AI credits one turn costs, by the turn outcome and what the turn used.

| The turn | Credits |
| --- | --- |
| answered, goal_completed, task_completed | 1 for the reply, plus what it used (below) |
| a ``search_knowledge`` call that found something | +1 each |
| a ``web_search`` call that returned results | +3 each |
| images read (image understanding on) | +2 once per turn |
| handoff | only the tool credits above, used before the hand-over |
| gated, fallback, error, or a turn that said nothing | 0 |

A search that found nothing, the free tools (``handoff``, ``set_state``, ``load_skill``, the goal
tools, ``complete_task``) and the skill classifier cost nothing. The count is code's: it reads
what the turn did, never what the model says it did.
"""

from __future__ import annotations

from dataclasses import dataclass

REPLY = 1
KNOWLEDGE_FOUND = 1
WEB_RESULTS = 3
IMAGES = 2
BILLED_OUTCOMES = ("answered", "goal_completed", "task_completed")


@dataclass
class Usage:
    """What a turn used that costs credits, counted as it happens."""

    knowledge_found: int = 0
    web_results: int = 0
    images_read: bool = False

    def tools(self) -> int:
        return self.knowledge_found * KNOWLEDGE_FOUND + self.web_results * WEB_RESULTS


def credits_for(outcome: str | None, usage: Usage) -> int:
    """The credits of a turn that ended with ``outcome`` after using ``usage``."""
    if outcome in BILLED_OUTCOMES:
        return REPLY + usage.tools() + (IMAGES if usage.images_read else 0)
    if outcome == "handoff":
        return usage.tools()
    return 0


def breakdown(outcome: str | None, usage: Usage) -> str:
    """A short account of the credits for the turn log, e.g. ``reply 1, knowledge 1``."""
    if outcome not in (*BILLED_OUTCOMES, "handoff"):
        return f"not billed ({outcome or 'silent'})"
    parts: list[str] = []
    if outcome in BILLED_OUTCOMES:
        parts.append(f"reply {REPLY}")
        if usage.images_read:
            parts.append(f"images {IMAGES}")
    if usage.knowledge_found:
        parts.append(f"knowledge {usage.knowledge_found * KNOWLEDGE_FOUND}")
    if usage.web_results:
        parts.append(f"web {usage.web_results * WEB_RESULTS}")
    return ", ".join(parts) or "nothing used before the hand-over"
