"""The tracing benchmark times every way in every round, exports the ``on`` ways' spans to
its receiver, and leaves tracing off and its hooks as they were."""

from __future__ import annotations

import os

from bench.harness.stand_in_model import bench_agent
from bench.tracing_cost import _measure, _receiver, _stop, _stubbed
from consumer import tracing
from consumer.model_calls import observe_model_calls
from engine.recording import recorded_agent


async def test_every_way_is_timed_and_the_on_way_exports_every_span() -> None:
    """Three sessions, two rounds: every way has a positive CPU figure per round; the ``on``
    way exported two spans per turn (turn and model call, warm-up round included), the
    sampled way fewer; tracing is off and no OTEL_* variable is left set afterwards."""
    before = {n: v for n, v in os.environ.items() if n.startswith("OTEL_")}
    process, port = _receiver()
    try:
        taken, exported, sampled = await _measure(sessions=3, rounds=2, port=port)
    finally:
        _stop(process)
    assert set(taken) == {"stubbed", "off", "on", "on, 1/10"}
    assert all(len(values) == 2 and all(v > 0 for v in values) for values in taken.values())
    assert exported == 3 * 2 * 3 * 2  # rounds (with warm-up) x waves x sessions x spans
    assert sampled < exported
    assert tracing._tracer is None and tracing._provider is None
    assert {n: v for n, v in os.environ.items() if n.startswith("OTEL_")} == before


def test_the_stub_takes_the_hooks_out_and_puts_them_back() -> None:
    """Inside ``_stubbed`` the turn path's tracing hooks are constants and the model-call
    span hook is off the provider; after it, all are back."""
    agent = recorded_agent(bench_agent(0))
    observe_model_calls(agent)
    hooks = agent.config.provider.hooks
    send_options, note_agent = tracing.send_options, tracing.note_agent
    with _stubbed(hooks):
        assert tracing.send_options is not send_options and tracing.note_agent is not note_agent
        assert tracing.model_call_span not in hooks._hooks
    assert tracing.send_options is send_options and tracing.note_agent is note_agent
    assert tracing.model_call_span in hooks._hooks
