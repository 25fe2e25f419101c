"""``provider_from_env``: the provider the environment asks for, with a line saying which.

    TURNFLOW_MODEL_API_KEY or OPENAI_API_KEY   -> OpenAIProvider (OPENAI_BASE_URL, TURNFLOW_MODEL)
    OPENAI_BASE_URL alone                      -> OpenAIProvider without a key (a local server)
    ANTHROPIC_API_KEY                          -> AnthropicProvider (ANTHROPIC_BASE_URL,
                                                  TURNFLOW_MODEL)
    nothing                                    -> RuleProvider, the offline demo aid

``TURNFLOW_MODEL_TIMEOUT`` (seconds) applies to either HTTP provider; ``TURNFLOW_MODEL_JSON_MODE``
(``json_schema`` by default, ``json_object`` or ``none``) to an OpenAI-compatible server that lacks
strict JSON-schema output. Every provider returned has
a ``description`` naming what was chosen, never the key, so a host can log it at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from engine.providers import anthropic, openai
from engine.providers.anthropic import AnthropicProvider
from engine.providers.base import ProviderHooks
from engine.providers.openai import OpenAIProvider
from engine.providers.rules import RuleProvider

ChosenProvider = OpenAIProvider | AnthropicProvider | RuleProvider


def _timeout(environ: Mapping[str, str]) -> float:
    raw = environ.get("TURNFLOW_MODEL_TIMEOUT", "")
    try:
        value = float(raw)
    except ValueError:
        return 60.0
    return value if value > 0 else 60.0


def _json_mode(environ: Mapping[str, str]) -> openai.JsonMode:
    raw = environ.get("TURNFLOW_MODEL_JSON_MODE", "").strip().lower()
    if raw == "json_object":
        return "json_object"
    if raw == "none":
        return "none"
    return "json_schema"


def provider_from_env(
    env: Mapping[str, str] | None = None, *, hooks: ProviderHooks | None = None
) -> ChosenProvider:
    """The provider the environment names (see the module docstring); ``.description`` says
    which was chosen."""
    environ = os.environ if env is None else env
    model = environ.get("TURNFLOW_MODEL") or None
    openai_key = next((environ[n] for n in openai.API_KEY_ENV if environ.get(n)), None)
    openai_url = environ.get("OPENAI_BASE_URL") or None
    if openai_key or openai_url:
        return OpenAIProvider(
            openai_key or "",
            model=model or openai.DEFAULT_MODEL,
            base_url=openai_url or openai.DEFAULT_BASE_URL,
            timeout=_timeout(environ),
            json_mode=_json_mode(environ),
            hooks=hooks,
        )
    anthropic_key = environ.get(anthropic.API_KEY_ENV) or None
    if anthropic_key:
        return AnthropicProvider(
            anthropic_key,
            model=model or anthropic.DEFAULT_MODEL,
            base_url=environ.get("ANTHROPIC_BASE_URL") or anthropic.DEFAULT_BASE_URL,
            timeout=_timeout(environ),
            hooks=hooks,
        )
    return RuleProvider(hooks=hooks)


__all__ = ["ChosenProvider", "provider_from_env"]
