"""The two prompts, built per call: speak (in seed 000's exact order) and understand.

Speak order: identity; knowledge; flow name and description; the step's prompt (or a default
guideline); pending fields with their ask; known fields as settled facts; instructions whose
``if`` holds (agent, flow, step); the customer's message or the no-new-message note; what this
turn already sent; the response format. Each section is a titled block so tests (and people)
can find it.

Identity and knowledge (speak) and the task (understand) are fixed for an agent version; so is
understand's "Topics" block (every message-triggered flow's description and example phrases, in
config order), sent whenever the call scores flows, whose turn section then only names the flows
to score. Every later section belongs to the turn. ``turn_sections_at`` marks where those start,
and the providers send the fixed part as the system prompt, then the history, then the turn's
sections, so the start of each prompt repeats byte for byte for a server's prefix cache.
``SpeakPrompt.prefix`` is the text both call kinds share (identity, knowledge, a line on the two
kinds of request, the topics): the append-only layout sends it as the one system prompt of a
conversation's calls (``engine.providers.transcript``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.config import FieldSpec, Flow, Instruction, TalkStep
from engine.envelopes import UnderstandPlan
from engine.history import history_messages
from engine.providers.base import ChatMessage
from engine.providers.transcript import JSON_REPLY
from engine.request import message_texts
from engine.session import Run
from engine.state import TurnState

if TYPE_CHECKING:
    from engine.agent_config import AgentConfig

DEFAULT_GUIDELINE = (
    "Continue the conversation naturally and help the customer with what this step is about."
)
NO_MESSAGE_NOTE = (
    "There is no new message from the customer: the assistant speaks first in this turn."
)
RETRY_NOTE = (
    "The customer's last message has no answer yet (an earlier attempt to reply failed): "
    "answer it now."
)


@dataclass
class SpeakPrompt:
    """A built speak prompt: system text, the chat messages and the structured ``meta``."""

    system: str
    messages: list[ChatMessage]
    meta: dict[str, Any]
    turn_sections_at: int | None = None
    """Where in ``system`` the sections of this turn start (``ModelRequest.turn_sections_at``)."""
    prefix: str | None = None
    """The agent's text both call kinds share (``ModelRequest.prefix``)."""


def _block(title: str, body: str) -> str:
    return f"## {title}\n{body.strip()}"


def _spec_meta(spec: FieldSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", exclude_none=True)


def _parts(state: TurnState) -> list[str]:
    """The turn's customer messages one by one, oldest first (a burst's, or the one)."""
    return message_texts(state.request)


def customer_message(state: TurnState) -> str | None:
    """The Customer message block's text: the message, or a burst's messages numbered in the
    order they were sent (the model sees each one and answers them together)."""
    texts = message_texts(state.request)
    if len(texts) <= 1:
        return state.request.message
    lines = [f"{i}. {text}" for i, text in enumerate(texts, start=1)]
    return f"The customer sent {len(texts)} messages in a row:\n" + "\n".join(lines)


def _instructions(
    state: TurnState, run: Run | None, items: Sequence[Instruction]
) -> list[str]:
    return [i.text() for i in items if i.text() and state.holds(i.if_, run)]


TOPICS_TITLE = "Topics (score only those listed under flows)"
SHARED_TASK = (
    "After the customer's words come one or two requests, each with its sections and its "
    "response format; follow the last one. To read the message: you do not reply; judge only "
    "what is asked, and answer null when the message says nothing about it. To reply: answer "
    "the customer."
)


@dataclass(frozen=True, slots=True)
class _Fixed:
    """The prompt text fixed for an agent version, built once and kept on its (frozen) config:
    every call of every turn would otherwise build it again."""

    speak: str  # speak's identity, then the knowledge base
    task: str  # understand's task
    topics: str | None  # understand's topics (every message-triggered flow), None: none
    topic_ids: frozenset[str]  # the flows the topics describe
    shared: str  # what both call kinds share in the append-only layout (``SpeakPrompt.prefix``)


def _fixed(config: AgentConfig) -> _Fixed:
    kept = config.__dict__.get(_FIXED)
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    identity = [f"You are {config.name}."]
    if config.persona:
        identity.append(f"Persona: {config.persona}")
    if config.goal:
        identity.append(f"Goal: {config.goal}")
    speak = [_block("Identity", "\n".join(identity))]
    if config.knowledge:
        speak.append(_block("Knowledge base", "\n\n".join(config.knowledge)))
    task = _block(
        "Task",
        f"You read the customer's latest message for {config.name}. You do not reply. "
        "Judge only what is asked below; answer null when the message says nothing about it.",
    )
    catalogue = topic_catalogue(config)
    topics = _block(TOPICS_TITLE, "\n".join(catalogue.values())) if catalogue else None
    shared = [*speak, _block("How you are asked", SHARED_TASK)]
    if topics is not None:
        shared.append(topics)
    kept = _Fixed("\n\n".join(speak), task, topics, frozenset(catalogue), "\n\n".join(shared))
    config.__dict__[_FIXED] = kept  # not a field: never compared, copied or dumped
    return kept


_FIXED = "_fixed_prompt_text"


def build_speak(
    state: TurnState,
    run: Run | None,
    flow: Flow | None,
    step: TalkStep | None,
    pending: list[str],
    *,
    retry: bool,
    idle_prompt: str | None = None,
) -> SpeakPrompt:
    """The speak prompt for one talk step (or the idle speaker when ``run`` is None)."""
    config = state.config
    fixed = _fixed(config)
    blocks = [fixed.speak]
    # Identity and knowledge are fixed for the agent version; every section after them belongs
    # to this turn and is sent after the history (``engine.providers.base.laid_out``).
    turn_sections_at = len(fixed.speak) + 2
    if flow is not None:
        about = flow.name or flow.id
        if flow.description:
            about += f": {flow.description}"
        blocks.append(_block("Current flow", about))
    if run is not None:
        guideline = (step.prompt if step else None) or DEFAULT_GUIDELINE
        blocks.append(_block("Guideline", guideline))
    elif idle_prompt:
        blocks.append(_block("Guideline", idle_prompt))
    if pending:
        lines = []
        for name in pending:
            spec = config.fields[name]
            # The values the envelope takes, said: the schema's enum is a grammar or nothing
            # to a small model, which then leaves "my brakes are squeaking" unread as a service.
            values = f" (one of: {', '.join(map(str, spec.enum))})" if spec.enum else ""
            lines.append(f"- {name}{values}: {spec.ask or spec.description or 'ask for it'}")
        blocks.append(_block("Still needed (ask for these)", "\n".join(lines)))
    # The known fields (``engine.values.is_known``), read in the one pass over ``data``.
    known = {k: v for k, v in state.session.data.items() if v is not None and v != ""}
    if known:
        facts = "\n".join(f"- {k}: {v}" for k, v in known.items())
        blocks.append(_block("Known facts (settled, do not ask again)", facts))
    rules = _instructions(state, run, config.instructions) if config.instructions else []
    if flow is not None and flow.instructions:
        rules += _instructions(state, run, flow.instructions)
    if step is not None and step.instructions:
        step_items = [Instruction.model_validate(i) for i in step.instructions]
        rules += _instructions(state, run, step_items)
    if rules:
        blocks.append(_block("Instructions", "\n".join(f"- {r}" for r in rules)))
    message = customer_message(state)
    history_ends_with_user = bool(state.history) and state.history[-1].role == "user"
    if message is not None:
        blocks.append(_block("Customer message", message))
    elif retry and history_ends_with_user:
        blocks.append(_block("Customer message", f"{RETRY_NOTE}\n{state.history[-1].text}"))
    else:
        blocks.append(_block("Customer message", NO_MESSAGE_NOTE))
    if state.sent:
        sent = "\n".join(f"- {text}" for text in state.sent)
        blocks.append(_block("Already sent this turn (do not repeat)", sent))
    fields_note = (
        f" and, for each of {', '.join(pending)}, the value the customer gave or null"
        if pending
        else ""
    )
    # Without fields, the line is ``JSON_REPLY``: the append-only layout asks for plain text
    # in its place (``engine.providers.transcript.short_reply``).
    blocks.append(_block("Response format", JSON_REPLY[:-1] + fields_note + "."))
    meta = {
        "agent_name": config.name,
        "flow_id": flow.id if flow else None,
        "step_id": step.id if step else None,
        "prompt": (step.prompt if step else idle_prompt),
        "pending": {n: _spec_meta(config.fields[n]) for n in pending},
        "known": dict(known),
        "message": state.request.text,
        "messages": _parts(state),
        "already_sent": list(state.sent),
        "retry": retry and message is None and history_ends_with_user,
        "idle": run is None,
    }
    return SpeakPrompt(system="\n\n".join(blocks), messages=history_messages(state), meta=meta,
                       turn_sections_at=turn_sections_at, prefix=fixed.shared)


def _known_note(state: TurnState, name: str, plan: UnderstandPlan) -> str:
    """For a field offered for a correction: its value now, and when to answer."""
    if name not in plan.corrections:
        return ""
    return (
        f" (already known: {state.session.data.get(name)!r}; give a value only when the "
        "customer changes it, else null)"
    )


def topic_catalogue(config: AgentConfig) -> dict[str, str]:
    """Each flow a message can start (its first message trigger has phrases), in config order:
    its line for the understand prompt's fixed "Topics" block, by flow id."""
    out: dict[str, str] = {}
    for flow, _, trigger in config.message_triggers:
        if trigger.message:
            about = f" — {flow.description}" if flow.description else ""
            examples = f" (e.g. {'; '.join(trigger.message)})"
            out[flow.id] = f"- {flow.id}: {flow.name or flow.id}{about}{examples}"
    return out


FLOWS_HEADING = ("flows: score 0-100 how well the message fits each topic (100: clearly about "
                 "it, 0: not about it)")
UNDERSTAND_FORMAT = "Answer with one JSON object on a single line, with exactly the sections above."
"""With the scale's two ends said and the object asked on one line, Qwen2.5-Coder-1.5B scores
a message plainly about a topic as such ("I need a flat tire fix on saturday": booking 100);
with either alone it scored 0 (bench/README.md, "Peers")."""


def build_understand(state: TurnState, plan: UnderstandPlan) -> SpeakPrompt:
    """The understand prompt: what to score, detect, answer and extract."""
    config = state.config
    fixed = _fixed(config)
    blocks = [fixed.task]
    turn_sections_at = len(fixed.task) + 2  # the task is fixed for the agent; the rest per turn
    if plan.flows:
        if fixed.topics is not None:
            # Every message-triggered flow's description, in config order: the same text on
            # every call of this agent version, so it joins the fixed part; the turn's own
            # section below only names the flows to score.
            blocks.append(fixed.topics)
            turn_sections_at = len(fixed.task) + 2 + len(fixed.topics) + 2
        lines = []
        for flow_id, phrases in plan.flows.items():
            flow = config.flow_map[flow_id]
            waits = plan.asking.get(flow_id)
            asking = f" — waiting for the customer's answer on: {waits}" if waits else ""
            if flow_id in fixed.topic_ids:
                lines.append(f"- {flow_id}: {flow.name or flow_id}{asking}")
                continue
            about = f" — {flow.description}" if flow.description else ""
            examples = f" (e.g. {'; '.join(phrases)})" if phrases else ""
            lines.append(f"- {flow_id}: {flow.name or flow_id}{about}{examples}{asking}")
        blocks.append(
            _block(FLOWS_HEADING, "\n".join(lines))
        )
    if plan.mentions:
        lines = [f"- {m}: {'; '.join(p)}" for m, p in plan.mentions.items()]
        blocks.append(_block("mentions: true when the customer brings this up", "\n".join(lines)))
    if plan.extract:
        lines = [f"- {m}: {', '.join(p)}" for m, p in plan.extract.items()]
        blocks.append(_block("extract: values the mention carries", "\n".join(lines)))
    if plan.branches:
        aliases = {full: alias for alias, full in plan.aliases().items()}
        lines = [f"- {aliases[full]}: {q}" for full, q in plan.branches.items()]
        blocks.append(_block("branches: answer each yes/no question", "\n".join(lines)))
    if plan.fields:
        lines = [
            f"- {n} ({s.type}{', one of ' + str(s.enum) if s.enum else ''}): "
            f"{s.description or s.ask or n}{_known_note(state, n, plan)}"
            for n, s in plan.fields.items()
        ]
        blocks.append(_block("fields: values the message states", "\n".join(lines)))
    blocks.append(_block("Customer message", customer_message(state) or ""))
    blocks.append(
        _block("Response format", UNDERSTAND_FORMAT)
    )
    meta = {
        "flows": {k: list(v) for k, v in plan.flows.items()},
        "mentions": {k: list(v) for k, v in plan.mentions.items()},
        "branches": {alias: plan.branches[full] for alias, full in plan.aliases().items()},
        "fields": {n: _spec_meta(s) for n, s in plan.fields.items()},
        **({"corrections": sorted(plan.corrections)} if plan.corrections else {}),
        **({"asking": dict(plan.asking)} if plan.asking else {}),
        "extract": {m: {p: _spec_meta(s) for p, s in ps.items()} for m, ps in plan.extract.items()},
        "message": state.request.text,
        "messages": _parts(state),
    }
    return SpeakPrompt(system="\n\n".join(blocks), messages=history_messages(state), meta=meta,
                       turn_sections_at=turn_sections_at, prefix=fixed.shared)
