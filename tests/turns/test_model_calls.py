"""Model-call metrics fed from a provider's hooks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from consumer import metrics
from consumer.model_calls import observe_model_calls
from engine import Agent, ProviderHooks
from engine.providers import MockProvider, RuleProvider
from engine.providers.base import CallRecord, Usage


def sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_calls_are_counted_once_per_call_even_if_hooked_twice() -> None:
    """Hooking an agent's provider twice still counts each call, duration, tokens and
    failure once."""
    hooks = ProviderHooks()
    agent = SimpleNamespace(config=SimpleNamespace(provider=SimpleNamespace(hooks=hooks)))
    assert observe_model_calls(agent) is True
    assert observe_model_calls(agent) is False
    calls = sample("turnflow_llm_calls_total", call="speak")
    tokens = sample("turnflow_model_tokens_total", call="speak", direction="output")
    errors = sample("turnflow_model_errors_total", call="speak", kind="fatal")
    hooks.emit(CallRecord(provider="openai", schema_name="speak", duration_s=0.2, ok=True,
                          usage=Usage(input_tokens=10, output_tokens=5)))
    hooks.emit(CallRecord(provider="openai", schema_name="speak", duration_s=0.1, ok=False,
                          error_kind="fatal"))
    assert sample("turnflow_llm_calls_total", call="speak") == calls + 2
    assert sample("turnflow_model_tokens_total", call="speak", direction="output") == tokens + 5
    assert sample("turnflow_model_errors_total", call="speak", kind="fatal") == errors + 1


def test_the_cached_part_of_the_prompt_is_counted_beside_the_whole() -> None:
    """``input`` counts the whole prompt; what the server read from and wrote to its prompt
    cache is counted under ``cache_read`` and ``cache_write``; an unknown count adds nothing."""
    hooks = ProviderHooks()
    agent = SimpleNamespace(config=SimpleNamespace(provider=SimpleNamespace(hooks=hooks)))
    observe_model_calls(agent)
    directions = ("input", "output", "cache_read", "cache_write")
    before = {d: sample("turnflow_model_tokens_total", call="understand", direction=d)
              for d in directions}
    hooks.emit(CallRecord(provider="anthropic", schema_name="understand", duration_s=0.1,
                          ok=True, usage=Usage(input_tokens=19, output_tokens=7,
                                               cache_read_tokens=18)))
    hooks.emit(CallRecord(provider="anthropic", schema_name="understand", duration_s=0.1,
                          ok=True, usage=Usage(input_tokens=1850, output_tokens=3,
                                               cache_read_tokens=0, cache_write_tokens=1800)))
    after = {d: sample("turnflow_model_tokens_total", call="understand", direction=d)
             for d in directions}
    assert {d: after[d] - before[d] for d in directions} == {
        "input": 1869, "output": 10, "cache_read": 18, "cache_write": 1800}


def test_providers_without_hooks_are_left_alone() -> None:
    """An agent whose provider has no hooks (a test double) is not touched."""
    agent = SimpleNamespace(config=SimpleNamespace(provider=object()))
    assert observe_model_calls(agent) is False


def _agent(provider: Any) -> Agent:
    """One message flow that phrases its reply through the model: one speak call per turn."""
    return Agent(
        name="Contagem",
        provider=provider,
        flows=[{"id": "talk", "on": [{"message": []}],
                "steps": [{"id": "reply", "prompt": "Responda em uma frase."}]}],
    )


@pytest.mark.parametrize("kind", ["rules", "mock"])
async def test_offline_providers_are_counted_by_call_kind(kind: str) -> None:
    """The rule provider and the scripted mock report each call, so the consumer counts them
    by call kind as it does for the HTTP providers."""
    rules = RuleProvider()
    provider = rules if kind == "rules" else MockProvider([rules.speak, rules.speak])
    agent = _agent(provider)
    assert observe_model_calls(agent) is True
    before = sample("turnflow_llm_calls_total", call="speak")
    first = await agent.turn({"session_id": f"{kind}-1", "message": "oi", "id": "a"})
    second = await agent.turn({"session_id": f"{kind}-2", "message": "oi", "id": "b"})
    assert first.llm_calls == second.llm_calls == 1
    assert sample("turnflow_llm_calls_total", call="speak") == before + 2
