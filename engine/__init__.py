"""turnflow's turn engine: the AI understands, the code is in control.

The public API of ``shared/spec/engine.md``; everything a host needs is importable from here.
"""

from engine.clock import Clock, FakeClock, SystemClock
from engine.errors import (
    FlowConfigurationError,
    MockExhausted,
    ProviderError,
    TurnflowError,
    TurnRequestError,
)
from engine.providers import (
    ChatMessage,
    MockProvider,
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderHooks,
    ToolCall,
    ToolSpec,
)

__all__ = [
    "ChatMessage",
    "Clock",
    "FakeClock",
    "FlowConfigurationError",
    "MockExhausted",
    "MockProvider",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderError",
    "ProviderHooks",
    "SystemClock",
    "ToolCall",
    "ToolSpec",
    "TurnRequestError",
    "TurnflowError",
]
