"""What the lifecycle adds to the speak prompt: the reply language and the remembered facts.

Both are code's decisions handed to the model to phrase with: the language comes from
``language.choose_language`` (fixed, response_language, the latest message, in that order),
the facts from ``set_state``. The blocks go right before the response format, which stays
last as in seed 000's order; ``meta`` carries the same values for offline providers and tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine import lifecycle_turn
from engine.language import choose_language

if TYPE_CHECKING:
    from engine.prompt import SpeakPrompt
    from engine.state import TurnState

FORMAT_TITLE = "## Response format"


def extend(state: TurnState, built: SpeakPrompt) -> SpeakPrompt:
    """Add the language and remembered-facts blocks (no change without lifecycle settings)."""
    turn = lifecycle_turn.of(state)
    if turn is None:
        return built
    blocks: list[str] = []
    settings = turn.settings
    if settings.language is not None:
        if turn.language is None:
            turn.language = choose_language(
                settings.language, state.request.text, turn.memory.language
            )
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
