"""Phase 6, Speak: the one speaker of the turn phrases its reply.

The speaker is the talk step phase 5 queued or, on a message with no run asking and nothing
said yet, the idle speaker (``"silent"`` mutes it). Under ``silenced`` nobody speaks. When a run
other than the floor holder already answered the message, the floor's talk is skipped
(``another-reply``). Tools run in rounds, at most ``max_tool_loops``, then one call without
tools so a message always comes back. A provider failure, an empty message or one longer than
``MAX_REPLY_CHARS`` never raises: the reply is ``deferred`` and phase 7 re-parks the step.
"""

from __future__ import annotations

import json
from typing import Any

from engine.actions import ToolContext, call_handler, read_tool_result
from engine.collect import pending, refuse
from engine.compaction import summarize
from engine.config import TalkStep, Tool
from engine.envelopes import parse_speak, speak_schema
from engine.errors import MockExhausted, ProviderError, UnusableReply
from engine.lifecycle import prompt as lifecycle_prompt
from engine.lifecycle import reply_check, speak_budget
from engine.lifecycle import tools as builtin_tools
from engine.lifecycle import turn as lifecycle_turn
from engine.prompt import build_speak
from engine.providers.base import ChatMessage, ModelRequest, ModelResponse, ToolSpec
from engine.records import built
from engine.session import Run
from engine.state import Speaker, SpeakReply, TurnState

MAX_REPLY_CHARS = 100_000
"""The longest message the speaker may say. A longer one (a model that ran on far past any
chat reply) is an unusable reply, retried and then answered by the fallback: it could not be
delivered (a broker record is 1 MiB by default) and, kept in the history, it would be sent
back to the model on every later turn. Providers over HTTP refuse such a body before this."""


async def run(state: TurnState) -> None:
    """Choose the speaker (or skip it) and make its call."""
    if state.done or state.request.silenced is not None:
        return
    speaker = state.speaker
    if speaker is None:
        if not _idle_speaks(state):
            return
        speaker = state.speaker = Speaker(run_id=None, step_id=None)
    run_ = state.live(speaker.run_id) if speaker.run_id else None
    if speaker.run_id is not None and run_ is None:
        state.speaker = None
        return
    if run_ is not None:
        others = [r for r in state.answered_by if r != run_.id]
        if state.is_message and run_.id == state.floor_run_id and others:
            state.outcome("another-reply", run_, detail=f"answered by {others[0]}")
            state.reply = SpeakReply(text=None, skipped=True)
            return
        if speaker.question is not None:
            state.reply = SpeakReply(text=speaker.question)
            return
    if state.config.lifecycle is None:  # no time budget, fallback or reply check to apply
        state.reply = await _call(state, run_)
        return
    state.reply = await speak_budget.bounded(state, _call(state, run_))
    reply_check.polish(state)


def _idle_speaks(state: TurnState) -> bool:
    return (
        state.is_message
        and not state.config.idle_silent
        and not state.asking()
        and not state.messages
        and not state.answered_by
    )


def _tool_specs(state: TurnState, names: list[str]) -> list[tuple[str, Tool, ToolSpec]]:
    out = []
    for name in names:
        tool = state.config.tools[name]
        out.append(
            (
                name,
                tool,
                ToolSpec(name=name, description=tool.description, parameters=tool.json_schema()),
            )
        )
    return out


async def _call(state: TurnState, run_: Run | None) -> SpeakReply:
    config = state.config
    flow = state.flow(run_.flow_id) if run_ else None
    step = flow.step(run_.step_id) if flow and run_ else None
    talk = step if isinstance(step, TalkStep) else None
    fields = pending(state, run_, talk) if run_ is not None and talk is not None else []
    retry = run_ is not None and state.retry_run_id == run_.id
    idle_prompt = config.idle.prompt if config.idle and run_ is None else None
    if config.provider is not None:
        await summarize(state)  # before the prompt is built, so the call sees the summary
    built = build_speak(state, run_, flow, talk, fields, retry=retry, idle_prompt=idle_prompt)
    built = lifecycle_prompt.extend(state, built)
    tool_names = list(talk.tools) if talk else list(config.idle.tools if config.idle else [])
    tools = _tool_specs(state, tool_names) if config.max_tool_loops > 0 else []
    turn = lifecycle_turn.of(state)
    if turn is not None and config.max_tool_loops > 0:
        tools += builtin_tools.offer(state, turn, run_)
    schema = speak_schema({n: config.fields[n] for n in fields})
    messages = list(built.messages)
    reply = SpeakReply(text=None)
    provider = config.provider
    if provider is None:
        reply.deferred, reply.error = "fatal", "the agent has no provider"
        return reply
    rounds = 0
    max_rounds = config.max_tool_loops
    while True:
        offer = speak_budget.round_tools(state, run_, tools) if rounds < max_rounds else []
        request = _speak_request(
            built.system,
            messages,
            schema,
            [spec for _, _, spec in offer],
            {**built.meta, "round": rounds + 1, "tools": [s.name for _, _, s in offer]},
            built.turn_sections_at,
            state.session.id,
            built.prefix,
        )
        reply.calls += 1
        state.llm_calls += 1
        try:
            response = await provider.generate(request)
        except MockExhausted:
            raise  # a scripted test spent one call too many: fail loudly, never defer
        except ProviderError as exc:
            reply.deferred, reply.error = exc.kind, str(exc)
            reply.retry_after_s = exc.retry_after
            reply.unusable = isinstance(exc, UnusableReply)
            return reply
        except Exception as exc:  # anything else a provider raises is retryable
            reply.deferred, reply.error = "retryable", f"{type(exc).__name__}: {exc}"
            return reply
        # Only the fields this call offered may be written; any other name (known to the
        # agent or not) is refused here and recorded as unknown-field, never written.
        text, values, refused = parse_speak(response, fields)
        refuse(state, "speak", refused, run_)
        reply.values.update(values)
        if response.tool_calls and offer:
            messages = await _run_tools(state, run_, offer, response, messages, reply)
            if speak_budget.stop_after_tools(state):
                return reply
            rounds += 1
            continue
        if text is None:
            # Tool calls in a round that offered none: the budget is spent and the model would
            # not answer without tools (``speak_budget.BUDGET_SPENT``: never a host retry).
            spent = bool(response.tool_calls) and rounds > 0
            reply.deferred = "retryable"
            reply.error = speak_budget.BUDGET_SPENT if spent else "empty message"
            reply.unusable = True
            return reply
        if len(text) > MAX_REPLY_CHARS:
            reply.deferred = "retryable"
            reply.error = f"a message of {len(text)} characters, over {MAX_REPLY_CHARS}"
            reply.unusable = True
            return reply
        reply.text = text
        return reply


_SPEAK_GIVEN = frozenset(ModelRequest.model_fields)  # a speak request gives every field


def _speak_request(
    system: str,
    messages: list[ChatMessage],
    json_schema: dict[str, Any],
    tools: list[ToolSpec],
    meta: dict[str, Any],
    turn_sections_at: int | None = None,
    conversation: str | None = None,
    prefix: str | None = None,
) -> ModelRequest:
    """``ModelRequest(schema_name="speak", system=..., messages=..., json_schema=...,
    tools=..., meta=...)``, built as ``engine.records`` builds a turn's own records: one per
    speak call. Validation would pass every chat message and tool spec through as it is
    (pydantic does not validate a model instance again) and make each list and dict a new one
    with the same items, which is what this does; anything validation would convert or refuse
    (an item of another type, a key not a str) takes the validated construction."""
    values = {
        "schema_name": "speak",
        "system": system,
        "messages": list(messages),
        "json_schema": dict(json_schema),
        "tools": list(tools),
        "meta": dict(meta),
        "turn_sections_at": turn_sections_at,
        "prefix": prefix,
        "conversation": conversation,
    }
    return built(ModelRequest, values, _SPEAK_GIVEN, validate=(
        type(system) is not str
        or not _CHAT_ONLY.issuperset(map(type, messages))
        or not _TOOL_ONLY.issuperset(map(type, tools))
        or not _STR_ONLY.issuperset(map(type, json_schema))
        or not _STR_ONLY.issuperset(map(type, meta))
        or not (conversation is None or type(conversation) is str)
        or not (prefix is None or type(prefix) is str)
    ))


# The exact types a speak request's items and keys must have to be built without validation
# (read as ``set(map(type, items)) <= ...``: a pass in C, not a generator step per item).
_CHAT_ONLY = frozenset((ChatMessage,))
_TOOL_ONLY = frozenset((ToolSpec,))
_STR_ONLY = frozenset((str,))


async def _run_tools(
    state: TurnState,
    run_: Run | None,
    offer: list[tuple[str, Tool, ToolSpec]],
    response: ModelResponse,
    messages: list[ChatMessage],
    reply: SpeakReply,
) -> list[ChatMessage]:
    by_name = {name: tool for name, tool, _ in offer}
    out = [
        *messages,
        ChatMessage(role="assistant", text=response.text, tool_calls=list(response.tool_calls)),
    ]
    ctx = ToolContext(
        data=dict(state.session.data),
        context=state.request.context,
        session_id=state.session.id,
        now=state.now,
        run_id=run_.id if run_ else None,
        step_id=run_.step_id if run_ else None,
    )
    for call in response.tool_calls:
        handled, answer = await speak_budget.tool_result(state, run_, call, set(by_name), response)
        if handled:
            out.append(ChatMessage(role="tool", tool_call_id=call.id, text=_dump(answer)))
            continue
        tool = by_name.get(call.name)
        result: Any
        if tool is None:
            result = {"error": f"unknown tool {call.name!r}"}
        else:
            try:
                read = read_tool_result(await call_handler(tool.handler, dict(call.arguments), ctx))
                result = read.result
                if read.data:
                    reply.patches.append(dict(read.data))
            except Exception as exc:  # the model sees the tool's error and may recover
                result = {"error": str(exc) or type(exc).__name__}
        out.append(ChatMessage(role="tool", tool_call_id=call.id, text=_dump(result)))
    return out


def _dump(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
