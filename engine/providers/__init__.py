"""Model providers: the protocol, the scripted mock, and the real and offline providers."""

from engine.providers.anthropic import AnthropicProvider
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
from engine.providers.openai import OpenAIProvider
from engine.providers.rules import RuleProvider
from engine.providers.settings import provider_from_env

__all__ = [
    "AnthropicProvider",
    "CallRecord",
    "ChatMessage",
    "MockProvider",
    "ModelRequest",
    "ModelResponse",
    "OpenAIProvider",
    "Provider",
    "ProviderHook",
    "ProviderHooks",
    "RuleProvider",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "provider_from_env",
]
