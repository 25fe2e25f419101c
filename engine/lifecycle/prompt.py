"""What the lifecycle does to the speak prompt: the last 20 turns of history, the loaded skills,
the active goal, the reply language and the remembered facts.

Older turns stay with the host; the model reads the 20 most recent. The language and the facts
are code's decisions handed to the model to phrase with: the language comes from
``language.choose_language`` (fixed, response_language, the latest message, in that order),
the facts from ``set_state``. The blocks go right before the response format, which stays
last as in seed 000's order; ``meta`` carries the same values for offline providers and tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lifecycle import goals, images, skills
from engine.lifecycle import turn as lifecycle_turn
from engine.lifecycle.language import LanguageChoice, choose_language
from engine.providers.base import ChatMessage

if TYPE_CHECKING:
    from engine.prompt import SpeakPrompt
    from engine.state import TurnState

FORMAT_TITLE = "## Response format"
_DETECTABLE = ("detected", "previous", "base_language")
HISTORY_TURNS = 20  # the reasoning loop reads the last 20 turns of the conversation


def last_turns(messages: list[ChatMessage], turns: int = HISTORY_TURNS) -> list[ChatMessage]:
    """The messages from the ``turns``-th last customer message on (this turn's included).

    A turn is a customer message and what was said after it; replies older than the first kept
    customer message go with their turn."""
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    if len(starts) <= turns:
        return messages
    return messages[starts[-turns]:]


def extend(state: TurnState, built: SpeakPrompt) -> SpeakPrompt:
    """Add the skills, goal, language and remembered-facts blocks (no change without lifecycle
    settings)."""
    turn = lifecycle_turn.of(state)
    if turn is None:
        return built
    built.messages = last_turns(built.messages)
    blocks: list[str] = []
    settings = turn.settings
    pictures = images.prompt_block(turn.image_reading, turn.image_notes)
    for block in (pictures, skills.prompt_block(turn), goals.prompt_block(turn)):
        if block is not None:
            blocks.append(block)
    if turn.skills:
        built.meta["skills"] = list(turn.skills)
    goal = goals.active(turn)
    if goal is not None and turn.memory.goal is not None:
        built.meta["goal"] = {
            **turn.memory.goal,
            "fields": {n: s.model_dump(exclude_none=True) for n, s in goal.fields.items()},
        }
    if settings.language is not None:
        if turn.language is None:
            turn.language = choose_language(
                settings.language, state.request.text, turn.memory.language
            )
            if turn.classified_language and turn.language.source in _DETECTABLE:
                # The skill classifier read the message too; its reading is the detection.
                turn.language = LanguageChoice(turn.classified_language, "detected")
            turn.memory.language = turn.language.code
        blocks.append(
            f"## Language\nWrite your reply in the language with code {turn.language.code!r}."
        )
        built.meta["language"] = turn.language.code
    if turn.memory.state:
        facts = "\n".join(f"- {k}: {v}" for k, v in turn.memory.state.items())
        blocks.append(f"## Remembered for this conversation\n{facts}")
        built.meta["state"] = dict(turn.memory.state)
    if not blocks:
        return built
    head, sep, tail = built.system.rpartition(FORMAT_TITLE)
    if sep:
        built.system = head + "\n\n".join(blocks) + "\n\n" + sep + tail
    else:
        built.system = built.system + "\n\n" + "\n\n".join(blocks)
    return built
