"""``provider_from_env``: the provider the environment asks for, with a line saying which.

    TURNFLOW_MODEL_API_KEY or OPENAI_API_KEY   -> OpenAIProvider (OPENAI_BASE_URL, TURNFLOW_MODEL)
    OPENAI_BASE_URL alone                      -> OpenAIProvider without a key (a local server)
    ANTHROPIC_API_KEY                          -> AnthropicProvider (ANTHROPIC_BASE_URL,
                                                  TURNFLOW_MODEL)
    nothing                                    -> RuleProvider, the offline demo aid

The tuning variables are in ``MODEL_SETTINGS``; the README's model table is ``model_env_table()``
so the two never drift. They are read here, not with the service settings, because the agent
module builds its provider and the engine imports nothing of the service. A tuning value that
cannot be read raises ``ValueError`` naming the variable, so a typo never silently picks a
mode the server refuses. Every provider returned has a ``description`` naming what was chosen,
never the key, so a host can log it at start-up.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import NamedTuple

from engine.providers import anthropic, openai
from engine.providers.anthropic import AnthropicProvider
from engine.providers.base import ProviderHooks
from engine.providers.http import DEFAULT_CONNECTIONS
from engine.providers.openai import OpenAIProvider
from engine.providers.rules import RuleProvider

ChosenProvider = OpenAIProvider | AnthropicProvider | RuleProvider
DEFAULT_TIMEOUT_S = 60.0


class ModelSetting(NamedTuple):
    """One environment variable of the model provider, as the README's table shows it."""

    name: str
    default: str
    meaning: str


MODEL_SETTINGS: tuple[ModelSetting, ...] = (
    ModelSetting("OPENAI_BASE_URL", "", "URL of an OpenAI-compatible server (`/v1` included); "
                 "alone, without a key, it picks that server (a local one)."),
    ModelSetting("TURNFLOW_MODEL_API_KEY", "", "API key of the OpenAI-compatible server "
                 "(`OPENAI_API_KEY` also works)."),
    ModelSetting("ANTHROPIC_API_KEY", "", "API key of the Anthropic Messages API "
                 "(`ANTHROPIC_BASE_URL` picks another server)."),
    ModelSetting("TURNFLOW_MODEL", "", "Model name sent with each request (default "
                 f"`{openai.DEFAULT_MODEL}` or `{anthropic.DEFAULT_MODEL}`)."),
    ModelSetting("TURNFLOW_MODEL_TIMEOUT", f"{DEFAULT_TIMEOUT_S:g}", "Seconds one model call "
                 "may take; `turnflow dev` waits for a turn in proportion to it."),
    ModelSetting("TURNFLOW_MODEL_MAX_TOKENS", str(openai.DEFAULT_MAX_TOKENS), "Cap on the "
                 "tokens of one reply; a reply cut off there is a failed call, never sent."),
    ModelSetting("TURNFLOW_MODEL_JSON_MODE", "json_schema", "How an OpenAI-compatible server is "
                 "asked for structured replies: `json_schema`, `json_object_schema` (a "
                 "`json_object` carrying the schema, for llama-cpp-python), `json_object` "
                 "or `none` (the prompt alone)."),
    ModelSetting("TURNFLOW_MODEL_PROMPT_CACHE", "off", "How the model server is asked to keep "
                 "the prompt's processed prefix: `off` (nothing added: servers that refuse "
                 "unknown fields take it), `llama.cpp` "
                 "(`cache_prompt: true`) or `key` (OpenAI's `prompt_cache_key`, one per agent "
                 "version); on Anthropic any value but `off` marks a cache breakpoint after "
                 "a long enough fixed part of the system prompt."),
    ModelSetting("TURNFLOW_MODEL_PROMPT_LAYOUT", "", "How an OpenAI-compatible server "
                 "gets the prompt: `cache` (the agent's fixed sections as the system prompt, "
                 "the history, then this turn's sections as a system entry before the "
                 "customer's words, so each prompt's start repeats for a prefix cache), `append` "
                 "(each call of a conversation sends the previous call's prompt and reply, "
                 "then what is new: one system prompt for both call kinds, this call's "
                 "sections last; with `TURNFLOW_MODEL_SLOTS` both kinds share one slot) or "
                 "`built` (every section in one system prompt first, then the history); unset: "
                 "`cache` when `TURNFLOW_MODEL_PROMPT_CACHE` asks for a cache, else `built`."),
    ModelSetting("TURNFLOW_MODEL_SLOTS", "0", "llama.cpp only: the server's slot count "
                 "(`--parallel`). With 2 or more each conversation's understand and speak "
                 "calls carry `id_slot`, a pair of slots picked by the conversation, so "
                 "neither kind evicts the other's cached prefix; 0 lets the server pick."),
)


def model_env_table() -> str:
    """The README's model table, in Markdown, from ``MODEL_SETTINGS``."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for setting in MODEL_SETTINGS:
        shown = f"`{setting.default}`" if setting.default else ""
        lines.append(f"| `{setting.name}` | {shown} | {setting.meaning} |")
    return "\n".join(lines)


def _timeout(environ: Mapping[str, str]) -> float:
    """Seconds, finite and above 0: ``30s`` or ``abc`` used to become 60 s unseen and ``inf``
    a call that never times out, so they raise as the other tuning values do."""
    raw = environ.get("TURNFLOW_MODEL_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"TURNFLOW_MODEL_TIMEOUT must be a number of seconds above 0; got {raw[:40]!r}"
        )
    return value


def _json_mode(environ: Mapping[str, str]) -> openai.JsonMode:
    raw = environ.get("TURNFLOW_MODEL_JSON_MODE", "").strip().lower()
    if not raw:
        return "json_schema"
    for mode in openai.JSON_MODES:
        if raw == mode:
            return mode
    raise ValueError(
        f"TURNFLOW_MODEL_JSON_MODE must be one of {', '.join(openai.JSON_MODES)}; "
        f"got {raw[:40]!r}"
    )


def _prompt_cache(environ: Mapping[str, str]) -> openai.PromptCache:
    raw = environ.get("TURNFLOW_MODEL_PROMPT_CACHE", "").strip().lower()
    if not raw:
        return "off"
    for mode in openai.PROMPT_CACHES:
        if raw == mode:
            return mode
    raise ValueError(
        f"TURNFLOW_MODEL_PROMPT_CACHE must be one of {', '.join(openai.PROMPT_CACHES)}; "
        f"got {raw[:40]!r}"
    )


def _layout(environ: Mapping[str, str]) -> openai.PromptLayout | None:
    raw = environ.get("TURNFLOW_MODEL_PROMPT_LAYOUT", "").strip().lower()
    if not raw:
        return None
    for layout in openai.PROMPT_LAYOUTS:
        if raw == layout:
            return layout
    raise ValueError(
        f"TURNFLOW_MODEL_PROMPT_LAYOUT must be one of {', '.join(openai.PROMPT_LAYOUTS)}; "
        f"got {raw[:40]!r}"
    )


MAX_SLOTS = 4096
"""More slots than any llama.cpp server runs: a larger number is a typo."""


def _slots(environ: Mapping[str, str]) -> int:
    raw = environ.get("TURNFLOW_MODEL_SLOTS", "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SLOTS:
        raise ValueError(
            f"TURNFLOW_MODEL_SLOTS must be a whole number of slots from 0 to {MAX_SLOTS}; "
            f"got {raw[:40]!r}"
        )
    return value


def _max_tokens(environ: Mapping[str, str]) -> int:
    raw = environ.get("TURNFLOW_MODEL_MAX_TOKENS", "").strip()
    if not raw:
        return openai.DEFAULT_MAX_TOKENS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"TURNFLOW_MODEL_MAX_TOKENS must be a whole number of tokens above 0; got {raw[:40]!r}"
        )
    return value


def provider_from_env(
    env: Mapping[str, str] | None = None,
    *,
    hooks: ProviderHooks | None = None,
    connections: int = DEFAULT_CONNECTIONS,
) -> ChosenProvider:
    """The provider the environment names (see the module docstring); ``.description`` says
    which was chosen. ``ValueError`` naming the variable when a tuning value is unreadable.
    ``connections``: how many connections an HTTP provider opens and keeps alive, at least as
    many as the calls its host runs at once."""
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
            max_tokens=_max_tokens(environ),
            json_mode=_json_mode(environ),
            prompt_cache=_prompt_cache(environ),
            layout=_layout(environ),
            slots=_slots(environ),
            hooks=hooks,
            connections=connections,
        )
    anthropic_key = environ.get(anthropic.API_KEY_ENV) or None
    if anthropic_key:
        return AnthropicProvider(
            anthropic_key,
            model=model or anthropic.DEFAULT_MODEL,
            base_url=environ.get("ANTHROPIC_BASE_URL") or anthropic.DEFAULT_BASE_URL,
            timeout=_timeout(environ),
            max_tokens=_max_tokens(environ),
            prompt_cache=_prompt_cache(environ) != "off",
            hooks=hooks,
            connections=connections,
        )
    return RuleProvider(hooks=hooks)


__all__ = ["MODEL_SETTINGS", "ChosenProvider", "ModelSetting", "model_env_table",
           "provider_from_env"]
