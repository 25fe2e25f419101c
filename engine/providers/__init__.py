"""Model providers: the protocol, the scripted mock, and the real and offline providers."""

from engine.providers.base import (
    CallRecord,
    ChatMessage,
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderHook,
    ProviderHooks,
    ToolCall,
    ToolSpec,
    Usage,
)
from engine.providers.mock import MockProvider

__all__ = [
    "CallRecord",
    "ChatMessage",
    "MockProvider",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderHook",
    "ProviderHooks",
    "ToolCall",
    "ToolSpec",
    "Usage",
]
