"""provider_from_env: which provider the environment names, described without the key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.providers import (
    AnthropicProvider,
    OpenAIProvider,
    ProviderHooks,
    RuleProvider,
    provider_from_env,
)
from engine.providers.openai import DEFAULT_MAX_TOKENS
from engine.providers.settings import MODEL_SETTINGS, model_env_table

SECRET = "sk-env-SECRET-42"


def test_openai_key_chooses_openai_with_model_and_url() -> None:
    """An OpenAI key, base URL and model pick an OpenAIProvider configured with them."""
    provider = provider_from_env({
        "OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
        "TURNFLOW_MODEL": "llama3.1", "TURNFLOW_MODEL_TIMEOUT": "7.5",
        "ANTHROPIC_API_KEY": "also-set",
    })
    assert isinstance(provider, OpenAIProvider)
    assert (provider.model, provider.base_url) == ("llama3.1", "http://127.0.0.1:11434/v1")
    assert provider.timeout == 7.5
    assert provider.description == (
        "OpenAI-compatible model llama3.1 at http://127.0.0.1:11434/v1 (with an API key)")
    assert SECRET not in provider.description + repr(provider)


def test_turnflow_key_alone_chooses_openai_defaults() -> None:
    """TURNFLOW_MODEL_API_KEY alone gives the OpenAI defaults."""
    provider = provider_from_env({"TURNFLOW_MODEL_API_KEY": SECRET})
    assert isinstance(provider, OpenAIProvider)
    assert provider.base_url == "https://api.openai.com/v1" and provider.model == "gpt-4o-mini"
    assert provider.json_mode == "json_schema"


def test_json_mode_from_environment() -> None:
    """TURNFLOW_MODEL_JSON_MODE picks any of the four modes; unset keeps json_schema."""
    modes = [provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
                                "TURNFLOW_MODEL_JSON_MODE": raw})
             for raw in ("json_object", "NONE", "json_object_schema", " json_schema ", "")]
    assert [p.json_mode for p in modes if isinstance(p, OpenAIProvider)] == [
        "json_object", "none", "json_object_schema", "json_schema", "json_schema"]


@pytest.mark.parametrize(
    ("name", "raw"),
    [("TURNFLOW_MODEL_JSON_MODE", "bogus"), ("TURNFLOW_MODEL_MAX_TOKENS", "lots"),
     ("TURNFLOW_MODEL_MAX_TOKENS", "0"), ("TURNFLOW_MODEL_MAX_TOKENS", "-5"),
     ("TURNFLOW_MODEL_TIMEOUT", "30s"), ("TURNFLOW_MODEL_TIMEOUT", "abc"),
     ("TURNFLOW_MODEL_TIMEOUT", "inf"), ("TURNFLOW_MODEL_TIMEOUT", "nan"),
     ("TURNFLOW_MODEL_TIMEOUT", "0"), ("TURNFLOW_MODEL_TIMEOUT", "-1")],
)
def test_unreadable_tuning_value_names_the_variable(name: str, raw: str) -> None:
    """A json mode, token cap or timeout that cannot be read raises ValueError naming the
    variable (a timeout of ``30s`` used to become 60 s unseen, ``inf`` one never reached)."""
    with pytest.raises(ValueError, match=name):
        provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", name: raw})
    if name == "TURNFLOW_MODEL_TIMEOUT":
        with pytest.raises(ValueError, match=name):
            provider_from_env({"ANTHROPIC_API_KEY": SECRET, name: raw})


def test_max_tokens_from_environment_for_both_http_providers() -> None:
    """TURNFLOW_MODEL_MAX_TOKENS caps both HTTP providers; unset gives the default cap."""
    capped = provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
                                "TURNFLOW_MODEL_MAX_TOKENS": "77"})
    claude = provider_from_env({"ANTHROPIC_API_KEY": SECRET, "TURNFLOW_MODEL_MAX_TOKENS": "88"})
    default = provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"})
    assert isinstance(capped, OpenAIProvider) and capped.max_tokens == 77
    assert isinstance(claude, AnthropicProvider) and claude.max_tokens == 88
    assert isinstance(default, OpenAIProvider) and default.max_tokens == DEFAULT_MAX_TOKENS


def test_model_env_table_names_every_tuning_variable() -> None:
    """The README's model table lists each model variable with its default."""
    table = model_env_table()
    for setting in MODEL_SETTINGS:
        assert f"| `{setting.name}` |" in table
    assert f"| `TURNFLOW_MODEL_MAX_TOKENS` | `{DEFAULT_MAX_TOKENS}` |" in table


def test_base_url_alone_chooses_a_keyless_local_server() -> None:
    """OPENAI_BASE_URL with no key is a local compatible server, used without a key."""
    provider = provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"})
    assert isinstance(provider, OpenAIProvider)
    assert provider.description.endswith("(without an API key)")


def test_anthropic_key_chooses_anthropic() -> None:
    """An Anthropic key alone picks the AnthropicProvider; an unset timeout is 60 s."""
    provider = provider_from_env({"ANTHROPIC_API_KEY": SECRET, "TURNFLOW_MODEL_TIMEOUT": ""})
    assert isinstance(provider, AnthropicProvider)
    assert provider.description.startswith("Anthropic model claude-")
    assert provider.timeout == 60.0
    assert SECRET not in provider.description + repr(provider)


def test_nothing_set_chooses_the_rule_provider_with_hooks() -> None:
    """With no model settings the offline RuleProvider is chosen, carrying the given hooks."""
    hooks = ProviderHooks()
    provider = provider_from_env({}, hooks=hooks)
    assert isinstance(provider, RuleProvider) and provider.hooks is hooks
    assert provider.description == "offline RuleProvider (a demo aid, not a model)"


def test_prompt_cache_from_environment() -> None:
    """TURNFLOW_MODEL_PROMPT_CACHE picks llama.cpp's cache_prompt or OpenAI's key; unset or
    empty keeps it off."""
    modes = [provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
                                "TURNFLOW_MODEL_PROMPT_CACHE": raw})
             for raw in ("llama.cpp", " LLAMA.CPP ", "key", "off", "")]
    assert [p.prompt_cache for p in modes if isinstance(p, OpenAIProvider)] == [
        "llama.cpp", "llama.cpp", "key", "off", "off"]


@settings(max_examples=200, deadline=None)
@given(raw=st.text())
def test_any_prompt_cache_value_is_taken_or_refused_naming_the_variable(raw: str) -> None:
    """Arbitrary text for TURNFLOW_MODEL_PROMPT_CACHE is one of the modes or a ValueError
    naming the variable, never another exception."""
    try:
        provider = provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
                                      "TURNFLOW_MODEL_PROMPT_CACHE": raw})
    except ValueError as exc:
        assert "TURNFLOW_MODEL_PROMPT_CACHE" in str(exc)
        assert raw.strip().lower() not in ("off", "llama.cpp", "key", "")
    else:
        assert isinstance(provider, OpenAIProvider)
        assert provider.prompt_cache == (raw.strip().lower() or "off")


def test_prompt_layout_and_slots_from_environment() -> None:
    """TURNFLOW_MODEL_PROMPT_LAYOUT picks the cache order or the prompt as built (unset: None,
    the provider follows the prompt cache setting); TURNFLOW_MODEL_SLOTS the llama.cpp slot
    count (default 0: the server picks)."""
    url = {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}
    made = [provider_from_env({**url, "TURNFLOW_MODEL_PROMPT_LAYOUT": raw,
                               "TURNFLOW_MODEL_SLOTS": slots})
            for raw, slots in (("", ""), (" BUILT ", "4"), ("cache", " 2 "))]
    assert [(p.layout, p.slots) for p in made if isinstance(p, OpenAIProvider)] == [
        (None, 0), ("built", 4), ("cache", 2)]


@settings(max_examples=200, deadline=None)
@given(layout=st.text(), slots=st.text())
def test_any_layout_or_slot_count_is_taken_or_refused_naming_the_variable(
    layout: str, slots: str,
) -> None:
    """Arbitrary text for TURNFLOW_MODEL_PROMPT_LAYOUT and TURNFLOW_MODEL_SLOTS is taken or
    refused with a ValueError naming the variable, never another exception."""
    try:
        provider = provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
                                      "TURNFLOW_MODEL_PROMPT_LAYOUT": layout,
                                      "TURNFLOW_MODEL_SLOTS": slots})
    except ValueError as exc:
        assert "TURNFLOW_MODEL_PROMPT_LAYOUT" in str(exc) or "TURNFLOW_MODEL_SLOTS" in str(exc)
    else:
        assert isinstance(provider, OpenAIProvider)
        assert provider.layout == (layout.strip().lower() or None)
        assert 0 <= provider.slots <= 4096
