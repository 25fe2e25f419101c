"""A provider that answers from a turn's recorded model calls instead of asking a model.

Each turn's calls are served by kind and, within a kind, in the order they were made: the new
agent's second ``speak`` call of a turn gets the recorded second ``speak`` reply, whatever it
asked in between. A recorded failure is raised again as the ``ProviderError`` it was (an
``UnusableReply`` for a reply that came back with nothing usable in it). A call
with nothing recorded for it (the new agent asks more, or the recording was pruned or never
kept) is counted in ``unrecorded`` and refused with a fatal ``ProviderError``: guessing a reply
would make the replay say something no model said.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from engine import ModelRequest, ModelResponse, ProviderError, ToolCall, UnusableReply

__all__ = ["TapeProvider", "UnrecordedCall", "response_of"]


class UnrecordedCall(ProviderError):
    """The replayed agent made a model call the recording has no reply for."""


def response_of(call: dict[str, Any]) -> ModelResponse:
    """The ``ModelResponse`` a recorded call stands for."""
    reply = call.get("reply") if isinstance(call.get("reply"), dict) else {}
    assert isinstance(reply, dict)
    envelope = reply.get("json")
    text = reply.get("text")
    tool_calls = reply.get("tool_calls")
    return ModelResponse(
        json=envelope if isinstance(envelope, dict) else None,
        text=text if isinstance(text, str) else "",
        tool_calls=[ToolCall.model_validate(c) for c in tool_calls]
        if isinstance(tool_calls, list)
        else [],
    )


class TapeProvider:
    """Serves one turn's recorded replies at a time; ``load`` them before each turn."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[dict[str, Any]]] = {}
        self.recorded = False
        self.unrecorded: Counter[str] = Counter()
        self.served: Counter[str] = Counter()
        self.turn_unrecorded = 0

    def load(self, calls: list[dict[str, Any]] | None) -> None:
        """The calls of the next turn (None: nothing was recorded for it)."""
        self.recorded = calls is not None
        self._queues = {}
        self.turn_unrecorded = 0
        for call in calls or []:
            if isinstance(call, dict) and isinstance(call.get("kind"), str):
                self._queues.setdefault(call["kind"], deque()).append(call)

    @property
    def left_over(self) -> int:
        """Recorded calls of this turn the replayed agent did not ask for."""
        return sum(len(queue) for queue in self._queues.values())

    async def generate(self, request: ModelRequest) -> ModelResponse:
        queue = self._queues.get(request.schema_name)
        if not queue:
            self.unrecorded[request.schema_name] += 1
            self.turn_unrecorded += 1
            why = "no recording for this turn" if not self.recorded else "none left of that kind"
            raise UnrecordedCall(
                f"replay: unrecorded {request.schema_name!r} call ({why})", kind="fatal"
            )
        call = queue.popleft()
        self.served[request.schema_name] += 1
        if call.get("ok") is False:
            kind = call.get("error_kind")
            if call.get("unusable") is True:
                raise UnusableReply(f"replay: recorded unusable reply: {call.get('error')}")
            raise ProviderError(
                f"replay: recorded failure: {call.get('error') or kind}",
                kind="fatal" if kind == "fatal" else "retryable",
            )
        return response_of(call)
