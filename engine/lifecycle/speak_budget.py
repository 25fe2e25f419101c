"""The speak call's budgets: ``max_tool_calls`` and ``turn_timeout_ms``, and what runs out means.

Every tool call counts, allowed or not: a call past the cap, or to a tool this step does not
offer, returns an error to the model and counts all the same. Once the cap is reached the next
call offers no tools, so the model answers with what it has. The time budget covers the whole
reasoning loop (every round and every tool) and is enforced by the settings' injected
``timer`` (default ``asyncio.timeout``, the event loop's monotonic clock; the engine never reads
the wall clock for it). When time runs out, or no message comes back, the reply is the last
text the model gave along with its tool calls, else the agent's ``fallback_message`` (the turn
outcome ``fallback``); with no fallback message the engine's retry path takes over as before,
except for a spent tool budget.

A spent tool budget is not a model failure. When the model still calls tools in the round
that offers none (``BUDGET_SPENT``), the reply is its last text given with tool calls, else the
``fallback_message``; with neither, a customer message's turn raises ``BudgetSpent`` and the
host answers it with its own fallback message at once, without running the turn (and its
tools) again.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from engine.config import Tool
from engine.envelopes import parse_speak
from engine.lifecycle import goals, skills
from engine.lifecycle import tools as builtin_tools
from engine.lifecycle import turn as lifecycle_turn
from engine.providers.base import ModelResponse, ToolCall, ToolSpec
from engine.state import SpeakReply

if TYPE_CHECKING:
    from engine.lifecycle.turn import LifecycleTurn
    from engine.session import Run
    from engine.state import TurnState

EMPTY = "empty message"
BUDGET_SPENT = "tool budget spent"
TIMED_OUT = "turn timeout"


Offer = list[tuple[str, Tool, ToolSpec]]


def round_tools(state: TurnState, run: Run | None, tools: Offer) -> Offer:
    """The tools one call of the loop offers.

    Without lifecycle settings: ``tools``, as the engine offers them. With them: the agent's
    tools and this round's built-ins (a skill loaded last round changes both), filtered by the
    loaded skills' allowlists; once ``max_tool_calls`` is spent only the goal tools remain, for
    their ``GOAL_HEADROOM`` extra calls; then nothing, so the model answers."""
    turn = lifecycle_turn.of(state)
    if turn is None:
        return tools
    own = [entry for entry in tools if entry[0] not in builtin_tools.NAMES]
    offer = own + builtin_tools.offer(state, turn, run)
    names = set(skills.allowed(turn, [name for name, _, _ in offer]))
    offer = [entry for entry in offer if entry[0] in names]
    if turn.tool_calls < turn.settings.max_tool_calls:
        return offer
    if goals.active(turn) is not None and turn.tool_calls < _goal_cap(turn):
        return [entry for entry in offer if entry[0] in goals.GOAL_TOOLS]
    return []


def _goal_cap(turn: LifecycleTurn) -> int:
    return turn.settings.max_tool_calls + goals.GOAL_HEADROOM


def stop_after_tools(state: TurnState) -> bool:
    """After a tool round: stop the loop when the model handed the conversation over."""
    turn = lifecycle_turn.of(state)
    return turn is not None and turn.handoff_requested is not None


async def tool_result(
    state: TurnState, run: Run | None, tool_call: ToolCall, offered: set[str],
    response: ModelResponse,
) -> tuple[bool, Any]:
    """Count the call and answer it when the lifecycle owns it: ``(handled, result)``.

    Not handled means the agent's own tool runs as before.
    """
    turn = lifecycle_turn.of(state)
    if turn is None:
        return False, None
    text = parse_speak(response)[0] if response.text or response.json is not None else None
    if text:
        turn.partial_text = text
    turn.tool_calls += 1
    goal_tool = tool_call.name in goals.GOAL_TOOLS and goals.active(turn) is not None
    cap = _goal_cap(turn) if goal_tool else turn.settings.max_tool_calls
    if turn.tool_calls > cap:
        return True, {"error": "tool call limit reached for this turn"}
    if tool_call.name not in offered:
        return True, {"error": f"tool {tool_call.name!r} is not allowed here"}
    if tool_call.name in builtin_tools.NAMES and tool_call.name in {
        name for name, _, _ in builtin_tools.offer(state, turn, run)
    }:
        return True, await builtin_tools.call(state, turn, run, tool_call)
    return False, None


async def bounded(state: TurnState, call: Awaitable[SpeakReply]) -> SpeakReply:
    """Run the speak loop inside the time budget and apply the fallback rules."""
    turn = lifecycle_turn.of(state)
    if turn is None:
        return await call
    try:
        await skills.prepare(state, turn)  # the classifier has its own budget, before the turn's
    except BaseException:
        if inspect.iscoroutine(call):
            call.close()  # the speak loop never started
        raise
    before = state.llm_calls
    try:
        async with turn.settings.timer(turn.settings.turn_timeout_s):
            reply = await call
    except TimeoutError:
        reply = SpeakReply(text=None, calls=state.llm_calls - before,
                           deferred="retryable", error=TIMED_OUT)
    if reply.text is not None or turn.handoff_requested is not None:
        return reply
    if reply.error not in (EMPTY, TIMED_OUT, BUDGET_SPENT):
        return reply  # a provider failure: the retry ladder, as without the lifecycle
    if turn.partial_text:
        reply.text, reply.deferred, reply.error = turn.partial_text, None, None
    elif turn.settings.fallback_message is not None:
        reply.text, reply.deferred, reply.error = turn.settings.fallback_message, None, None
        reply.values.clear()
        turn.fallback = True
    return reply
