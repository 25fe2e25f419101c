"""Step 4 of a lifecycle turn: which skills are loaded, and the tools they allow.

A skill is a named text (instructions, URLs to share, a procedure) with a description and a
mode. Loaded for this turn, in this order: every ``always_on`` skill; the ``flow_only`` skills
the host's start named (they stay with the conversation); the skill of the active goal; then up
to ``MAX_PRESELECTED`` ``model_selected`` skills a fast classifier call picks from the
descriptions and the message. The model can load further ``model_selected`` skills itself with
``load_skill`` (offered while any remain unloaded; a name that is not one of them is refused
and changes nothing, see ``load_asked``). Loaded text is capped at
``MAX_SKILL_CHARS`` characters per turn: a skill that would go past the cap is not loaded (the
classifier's and ``load_skill``'s callers are told so), so what is loaded is always whole.

The classifier has its own short budget (``classifier_timeout_ms``) and runs before the turn's
time budget starts; if it fails, times out or answers nonsense, the turn continues without it.
It is one model call: it counts in ``llm_calls`` (the calls the turn really made) and never in
``max_tool_calls`` or ``turn_timeout_ms``, and it is not billed.

Tool allowlists: when every loaded skill has a ``tool_allowlist``, the tools offered are the
union of those lists; when any loaded skill has none (or no skill is loaded), every tool stays.
``handoff`` and ``complete_task`` are never removed, nor the goal tools, and ``load_skill``
stays while unloaded skills remain.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from engine.errors import MockExhausted
from engine.lifecycle.settings import MAX_SKILL_CHARS
from engine.providers.base import ChatMessage, ModelRequest

if TYPE_CHECKING:
    from engine.lifecycle.settings import Skill
    from engine.lifecycle.turn import LifecycleTurn
    from engine.state import TurnState

MAX_PRESELECTED = 2
NEVER_REMOVED = frozenset({"handoff", "complete_task", "submit_goal_fields", "complete_goal"})
LOAD_SKILL = "load_skill"
CLASSIFIER_SCHEMA = "skills"
_LANGUAGE = re.compile(r"[a-z]{2,3}(?:-[A-Za-z]{2,4})?")


def by_name(turn: LifecycleTurn) -> dict[str, Skill]:
    return {skill.name: skill for skill in turn.settings.skills}


def load(turn: LifecycleTurn, name: str) -> str | None:
    """Load one skill for this turn; the reason it cannot be loaded, or None when it is."""
    skill = by_name(turn).get(name)
    if skill is None:
        return f"unknown skill {name!r}"
    if name in turn.skills:
        return None
    used = sum(len(by_name(turn)[n].text) for n in turn.skills)
    if used + len(skill.text) > MAX_SKILL_CHARS:
        return f"skill {name!r} would pass {MAX_SKILL_CHARS:,} characters of skill text this turn"
    turn.skills.append(name)
    if skill.goal is not None and turn.memory.goal is None:
        turn.memory.goal = {"skill": name, "answers": {}}
    return None


def load_asked(turn: LifecycleTurn, name: str) -> str | None:
    """``load_skill``: load the skill the model asked for, or say why not (and change nothing).

    The model may load only what the tool is offered for, a ``model_selected`` skill not loaded
    yet. A ``flow_only`` skill loads only when the host's start names it, and an ``always_on``
    one is loaded already: a model naming either (or a loaded skill, or no skill) is refused,
    so it can neither start a skill's goal nor keep a skill in the session.
    """
    skill = by_name(turn).get(name)
    if skill is None:
        return f"unknown skill {name!r}"
    if skill.mode != "model_selected":
        return (f"skill {name!r} is {skill.mode}: load_skill loads only model_selected "
                "skills not loaded yet")
    if name in turn.skills:
        return f"skill {name!r} is already loaded"
    return load(turn, name)


def load_fixed(turn: LifecycleTurn) -> None:
    """always_on, flow_only named by the host's start, and the active goal's skill."""
    skills = by_name(turn)
    for skill in turn.settings.skills:
        if skill.mode == "always_on":
            load(turn, skill.name)
    for name in turn.memory.flow_skills:
        if name in skills and skills[name].mode == "flow_only":
            load(turn, name)
    goal = turn.memory.goal
    if goal is not None and goal.get("skill") in skills:
        load(turn, str(goal["skill"]))


async def prepare(state: TurnState, turn: LifecycleTurn) -> None:
    """Choose this turn's skills once, before the speak call and outside its budget."""
    if turn.prepared or not turn.settings.skills:
        return
    turn.prepared = True
    load_fixed(turn)
    await classify(state, turn)


def unloaded_selectable(turn: LifecycleTurn) -> list[Skill]:
    """The model_selected skills not loaded this turn."""
    return [
        s for s in turn.settings.skills if s.mode == "model_selected" and s.name not in turn.skills
    ]


async def classify(state: TurnState, turn: LifecycleTurn) -> None:
    """The fast classifier call: preload up to two model_selected skills, detect the language."""
    provider = state.config.provider
    message = state.request.text
    candidates = unloaded_selectable(turn)
    if provider is None or message is None or not candidates:
        return
    listing = "\n".join(f"- {s.name}: {s.description}" for s in candidates)
    request = ModelRequest(
        schema_name=CLASSIFIER_SCHEMA,
        system=(
            "Pick the skills that match the customer's message (at most "
            f"{MAX_PRESELECTED}, none when nothing matches) and the message's language "
            "as an ISO 639-1 code.\n\n## Skills\n" + listing
        ),
        messages=[ChatMessage(role="user", text=message)],
        json_schema={
            "type": "object",
            "properties": {
                "skills": {"type": "array", "items": {"type": "string",
                                                      "enum": [s.name for s in candidates]}},
                "language": {"type": ["string", "null"]},
            },
            "required": ["skills", "language"],
            "additionalProperties": False,
        },
        meta={"call": CLASSIFIER_SCHEMA, "message": message,
              "skills": {s.name: s.description for s in candidates}},
    )
    state.llm_calls += 1
    turn.classifier_calls += 1
    try:
        async with asyncio.timeout(turn.settings.classifier_timeout_ms / 1000):
            response = await provider.generate(request)
    except MockExhausted:
        raise  # a scripted test spent one call too many: fail loudly
    except Exception as exc:  # the turn continues without it, whatever went wrong
        state.outcome("skills-unclassified", detail=type(exc).__name__, llm_calls=1)
        return
    picked, language = _read(response.json)
    state.outcome("skills-classified", detail=",".join(picked) or "none", llm_calls=1)
    allowed = {s.name for s in candidates}
    for name in [n for n in picked if n in allowed][:MAX_PRESELECTED]:
        load(turn, name)
    if language is not None:
        turn.classified_language = language


def _read(value: Any) -> tuple[list[str], str | None]:
    if not isinstance(value, dict):
        return [], None
    raw = value.get("skills")
    picked = [n for n in raw if isinstance(n, str)] if isinstance(raw, list) else []
    language = value.get("language")
    if not isinstance(language, str) or not _LANGUAGE.fullmatch(language.strip()):
        language = None
    return list(dict.fromkeys(picked)), language.strip().lower() if language else None


def allowed(turn: LifecycleTurn, names: list[str]) -> list[str]:
    """Apply the loaded skills' allowlists to the tool names on offer."""
    loaded = [by_name(turn)[n] for n in turn.skills]
    if not loaded or any(s.tool_allowlist is None for s in loaded):
        return names
    union: set[str] = set()
    for skill in loaded:
        union.update(skill.tool_allowlist or [])
    keep = union | NEVER_REMOVED
    if unloaded_selectable(turn):
        keep.add(LOAD_SKILL)
    return [n for n in names if n in keep]


def prompt_block(turn: LifecycleTurn) -> str | None:
    """The loaded skills' texts for the speak prompt."""
    if not turn.skills:
        return None
    skills = by_name(turn)
    body = "\n\n".join(f"### {name}\n{skills[name].text}" for name in turn.skills)
    return f"## Skills\n{body}"


def texts(turn: LifecycleTurn) -> list[str]:
    """The loaded skills' texts, for the link check's own domains."""
    skills = by_name(turn)
    return [skills[n].text for n in turn.skills]
