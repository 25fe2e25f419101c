"""Model-call metrics fed from a provider's hooks."""

from __future__ import annotations

from types import SimpleNamespace

from consumer import metrics
from consumer.model_calls import observe_model_calls
from engine import ProviderHooks
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


def test_providers_without_hooks_are_left_alone() -> None:
    """An agent whose provider has no hooks (a test double) is not touched."""
    agent = SimpleNamespace(config=SimpleNamespace(provider=object()))
    assert observe_model_calls(agent) is False
