"""``MockProvider``: a scripted provider that fails loudly on one call too many.

Each script item is a dict (returned as the JSON envelope), a ``ModelResponse``, an exception
instance (raised), or a callable ``request -> item``. Every request is recorded in ``.calls``.
An empty script therefore asserts that a turn spends no model call at all. Like every provider
it reports each call to its ``hooks``, so a service running it counts calls by kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from engine.errors import MockExhausted
from engine.providers.base import ModelRequest, ModelResponse, ProviderHooks
from engine.providers.http import observed

ScriptItem = dict[str, Any] | ModelResponse | BaseException | Callable[[ModelRequest], Any]


class MockProvider:
    """Returns the scripted items in order; raises ``MockExhausted`` past the end."""

    def __init__(
        self, script: Iterable[ScriptItem] = (), *, hooks: ProviderHooks | None = None
    ) -> None:
        self.script: list[ScriptItem] = list(script)
        self.calls: list[ModelRequest] = []
        self.hooks = hooks or ProviderHooks()

    @property
    def remaining(self) -> int:
        return len(self.script) - len(self.calls)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        async def call() -> ModelResponse:
            return self._next(request)

        return await observed(
            self.hooks, provider="mock", schema_name=request.schema_name, call=call,
            request=request,
        )

    def _next(self, request: ModelRequest) -> ModelResponse:
        index = len(self.calls)
        self.calls.append(request)
        if index >= len(self.script):
            raise MockExhausted(
                f"MockProvider called {index + 1} times but scripted for {len(self.script)}; "
                f"unexpected {request.schema_name!r} call"
            )
        return _to_response(self.script[index], request)


def _to_response(item: Any, request: ModelRequest) -> ModelResponse:
    if callable(item) and not isinstance(item, (dict, ModelResponse, BaseException)):
        item = item(request)
    if isinstance(item, BaseException):
        raise item
    if isinstance(item, ModelResponse):
        return item
    if isinstance(item, dict):
        return ModelResponse(json=item)
    if isinstance(item, str):
        return ModelResponse(text=item)
    raise TypeError(f"MockProvider script item of unsupported type {type(item).__name__}")
