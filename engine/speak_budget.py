"""The speak call's budgets: ``max_tool_calls`` and ``turn_timeout_ms``, and what runs out means.

Every tool call counts, allowed or not: a call past the cap, or to a tool this step does not
offer, returns an error to the model and counts all the same. Once the cap is reached the next
call offers no tools, so the model answers with what it has. The time budget covers the whole
reasoning loop (every round and every tool) and is enforced by the settings' injected
``timer`` (default ``asyncio.timeout``, the event loop's monotonic clock; the engine never reads
the wall clock for it). When time runs out, or no message comes back, the reply is the last
text the model gave along with its tool calls, else the agent's ``fallback_message`` (the turn
outcome ``fallback``); with no fallback message the engine's retry path takes over as before.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from engine import builtin_tools, lifecycle_turn
from engine.envelopes import parse_speak
from engine.providers.base import ModelResponse, ToolCall
from engine.state import SpeakReply

if TYPE_CHECKING:
    from engine.session import Run
    from engine.state import TurnState

EMPTY = "empty message"
TIMED_OUT = "turn timeout"


def tools_left(state: TurnState) -> bool:
    """Whether the next call may still offer tools."""
    turn = lifecycle_turn.of(state)
    return turn is None or turn.tool_calls < turn.settings.max_tool_calls


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
    if turn.tool_calls > turn.settings.max_tool_calls:
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
    before = state.llm_calls
    try:
        async with turn.settings.timer(turn.settings.turn_timeout_s):
            reply = await call
    except TimeoutError:
        reply = SpeakReply(text=None, calls=state.llm_calls - before,
                           deferred="retryable", error=TIMED_OUT)
    if reply.text is not None or turn.handoff_requested is not None:
        return reply
    if reply.error not in (EMPTY, TIMED_OUT):
        return reply  # a provider failure: the retry ladder, as without the lifecycle
    if turn.partial_text:
        reply.text, reply.deferred, reply.error = turn.partial_text, None, None
    elif turn.settings.fallback_message is not None:
        reply.text, reply.deferred, reply.error = turn.settings.fallback_message, None, None
        reply.values.clear()
        turn.fallback = True
    return reply
