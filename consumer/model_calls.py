"""Model-call metrics and spans from the provider's hooks (the engine imports no metrics or
tracing library).

When the agent's provider exposes ``hooks`` (an ``engine.ProviderHooks``), each call is counted
by call kind, timed by call kind and provider, and its tokens and failures counted; while
tracing is on it is also a span (``tracing.model_call_span``). Providers without hooks (test
doubles) are left alone. Hooking twice is harmless: a provider is marked.
"""

from __future__ import annotations

from typing import Any

from consumer import metrics, tracing
from engine import ProviderHooks
from engine.providers.base import CallRecord

__all__ = ["observe_model_calls", "record_model_call"]

_MARK = "_turnflow_metrics_hooked"


def record_model_call(record: CallRecord) -> None:
    """Feed one call record into the consumer's metrics."""
    call = record.schema_name
    metrics.child(metrics.LLM_CALLS, call).inc()
    metrics.child(metrics.MODEL_CALL_DURATION, call, record.provider).observe(record.duration_s)
    if not record.ok:
        metrics.MODEL_ERRORS.labels(call=call, kind=record.error_kind or "retryable").inc()
    if record.usage is not None:
        # ``input`` is the whole prompt; ``cache_read`` and ``cache_write`` the parts of it the
        # server read from or wrote to its prompt cache, where the API says.
        counts = (("input", record.usage.input_tokens), ("output", record.usage.output_tokens),
                  ("cache_read", record.usage.cache_read_tokens),
                  ("cache_write", record.usage.cache_write_tokens))
        for direction, count in counts:
            if count is not None:
                # The labelled child kept per (call, direction): ``labels(...)`` by keyword
                # costs about 1.4 µs a lookup, up to four a call.
                metrics.child(metrics.MODEL_TOKENS, call, direction).inc(count)


def observe_model_calls(agent: Any) -> bool:
    """Attach ``record_model_call`` and ``tracing.model_call_span`` to the agent's provider
    hooks; True when attached."""
    config = getattr(agent, "config", None)
    provider = getattr(config, "provider", None) or getattr(agent, "provider", None)
    hooks = getattr(provider, "hooks", None)
    if not isinstance(hooks, ProviderHooks) or getattr(hooks, _MARK, False):
        return False
    hooks.add(record_model_call)
    hooks.add(tracing.model_call_span)
    setattr(hooks, _MARK, True)
    return True
