"""What each process exports: its own families only, no ``_created`` series, a build-info
series, every known label value at 0 from the start, and turn outcomes as the turn reported."""

from __future__ import annotations

from typing import get_args

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from consumer import metrics
from consumer.turns.decisions import (
    DeadLetter,
    Fallback,
    RetryPolicy,
    VersionConflictsExhausted,
    decide,
)
from consumer.turns.parser import RejectReason
from consumer.turns.pipeline import turn_outcome
from engine import FakeClock, ProviderError, TurnRequestError, UnusableReply
from engine.providers import RuleProvider
from examples.demo_agent import build_agent
from tests.examples.host import Conversation


def _samples(process: str) -> dict[str, list[dict[str, str]]]:
    text = generate_latest(metrics.exports_for(process)).decode()
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def test_each_process_exports_only_its_own_families_and_no_created_series() -> None:
    """The scheduler serves no consumer counters, the consumer no timer metrics, the relay only
    the outbox's; nobody serves a ``_created`` series."""
    consume, schedule, relay = (_samples(p) for p in ("consume", "schedule", "relay"))
    assert "turnflow_turns_total" in consume and "turnflow_turns_total" not in schedule
    assert "turnflow_timers_pending" in schedule and "turnflow_timers_pending" not in consume
    assert set(relay) <= {"turnflow_outbox_backlog", "turnflow_outbox_published_total",
                          "turnflow_build_info", "turnflow_gc_seconds_total"}
    for exported in (consume, schedule, relay):  # every process times its collections
        assert {s["generation"] for s in exported["turnflow_gc_seconds_total"]} == {"0", "1", "2"}
    for exported in (consume, schedule, relay):
        assert not [name for name in exported if name.endswith("_created")]


def test_every_metric_is_served_by_some_process() -> None:
    """A metric defined in consumer/metrics.py but in no process's families would never be
    exported: each family belongs to consume, schedule or relay."""
    served = {f._name for families in metrics.PROCESS_FAMILIES.values() for f in families}
    defined = {m.name for m in metrics.REGISTRY.collect()}
    assert defined - served == set()


def test_known_label_values_exist_at_zero_before_any_increment() -> None:
    """Every DLQ reason, turn outcome and input kind has a series from the start, so an alert
    on increase() sees the first dead letter of each reason."""
    consume = _samples("consume")
    reasons = {labels["reason"] for labels in consume["turnflow_dlq_total"]}
    assert set(get_args(RejectReason)) <= reasons
    assert set(metrics.DECISION_DLQ_REASONS) <= reasons
    outcomes = {labels["outcome"] for labels in consume["turnflow_turn_outcomes_total"]}
    assert outcomes == set(metrics.TURN_OUTCOME_VALUES) >= {
        "answered", "task_completed", "handoff", "fallback", "error"}
    kinds = {labels["kind"] for labels in consume["turnflow_turns_total"]}
    assert kinds == {"message", "wake", "event", "start"}
    scheduled = _samples("schedule")["turnflow_timers_scheduled_total"]
    assert {labels["action"] for labels in scheduled} == {"upsert", "replace"}


@pytest.mark.parametrize(
    "error",
    [
        TurnRequestError("no input"),
        ProviderError("refused", kind="fatal", status=401),
        ProviderError("busy", kind="retryable"),
        VersionConflictsExhausted(session_id="s1", attempts=6),
        RuntimeError("bug"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_reason_the_consumer_dead_letters_with_is_pre_created(error: Exception) -> None:
    """The reasons decide() gives once retries (and the outage bound) are spent are all among
    the pre-created ones; a message the model could not answer falls back under a pre-created
    reason instead."""
    policy = RetryPolicy(max_retries=1, model_outage_s=10.0)
    decision = decide(error, attempt=99, policy=policy, waited_s=60.0, answerable=False)
    assert isinstance(decision, DeadLetter)
    assert decision.reason in metrics.DLQ_REASONS
    for failure in (ProviderError("busy", kind="retryable"), UnusableReply("not JSON")):
        fallback = decide(failure, attempt=99, policy=policy, waited_s=60.0)
        assert isinstance(fallback, Fallback) and fallback.reason in metrics.FALLBACK_REASONS


def test_build_info_names_version_agent_and_process() -> None:
    """``turnflow_build_info`` is 1 with the version, the agent's name and the command."""
    metrics.set_build_info("consume", agent="Ana")
    infos = _samples("consume")["turnflow_build_info"]
    ours = [labels for labels in infos if labels["agent"] == "Ana"]
    assert ours and ours[0]["process"] == "consume" and ours[0]["version"]


async def test_a_flow_handing_over_to_a_flow_is_counted_as_answered() -> None:
    """The demo's welcome moves the customer to the booking flow (outcome code ``handoff``):
    that turn answered, it did not hand the customer to a person."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    chat = Conversation(build_agent(RuleProvider(), clock), clock)
    await chat.say("hi")
    moved = await chat.say("my name is Sam")
    assert "handoff" in [o.code for o in moved.outcomes]
    assert turn_outcome(moved) == "answered"
    finished = await chat.say("what are your opening hours?")
    assert [e.reason for e in finished.ended] and turn_outcome(finished) == "answered"


def test_a_kept_child_counts_into_the_same_series_as_labels() -> None:
    """``metrics.child`` is ``labels`` remembered: counts through either land in one series."""
    from consumer import metrics

    before = metrics.TURNS.labels(kind="wake")._value.get()
    metrics.child(metrics.TURNS, "wake").inc()
    metrics.TURNS.labels(kind="wake").inc()
    metrics.child(metrics.TURNS, "wake").inc(2)
    assert metrics.TURNS.labels(kind="wake")._value.get() == before + 4
    assert metrics.child(metrics.TURNS, "wake") is metrics.TURNS.labels("wake")


def test_a_kept_child_with_two_labels_is_the_labelled_series() -> None:
    """With several labels, ``metrics.child`` keeps the child of exactly those values in order."""
    from consumer import metrics

    kept = metrics.child(metrics.MODEL_CALL_DURATION, "speak", "bench-two-labels")
    assert kept is metrics.MODEL_CALL_DURATION.labels(call="speak", provider="bench-two-labels")
    assert kept is not metrics.child(metrics.MODEL_CALL_DURATION, "bench-two-labels", "speak")
