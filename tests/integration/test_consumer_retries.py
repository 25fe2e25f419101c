"""Model failures: a retryable one backs off that session only, then succeeds or, past the
outage bound, is answered with the fallback message; a fatal one dead-letters at once."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from consumer import metrics
from engine import Agent, ModelRequest, ModelResponse, ProviderError
from engine.providers.rules import RuleProvider
from tests.integration.harness import DLQ, SetupFactory, running_consumer
from tests.integration.test_consumer_dlq import read_dlq

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


class FailingProvider:
    """The rule provider, except understand calls whose message names a failure:
    ``transient`` fails twice then works, ``always`` keeps failing (retryable), ``fatal``
    fails fatally."""

    def __init__(self) -> None:
        self._inner = RuleProvider()
        self.failures: Counter[str] = Counter()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        text = str(request.meta.get("message") or "")
        if request.schema_name == "understand":
            if "fatal" in text:
                self.failures[text] += 1
                raise ProviderError("refused", kind="fatal", status=400)
            if "always" in text or ("transient" in text and self.failures[text] < 2):
                self.failures[text] += 1
                raise ProviderError("overloaded", kind="retryable", status=503)
        return await self._inner.generate(request)


def failing_agent(provider: FailingProvider) -> Agent:
    return Agent(
        name="Eco",
        provider=provider,
        flows=[
            {"id": "pizza", "on": [{"message": ["quero pizza"]}],
             "steps": [{"id": "p", "say": "pizza"}]},
            {"id": "eco", "on": [{"message": []}], "steps": [{"id": "e", "say": "eco"}]},
        ],
    )


def record(session_id: str, text: str) -> dict[str, Any]:
    return {"session_id": session_id, "message": text, "id": f"wamid.{uuid.uuid4().hex[:10]}"}


async def test_model_failures_retry_per_session_then_fall_back(
    service_setup: SetupFactory,
) -> None:
    """In one partition: a transient failure is retried with backoff and then answered, while
    a healthy session behind it is answered first; a session that keeps failing is answered
    with the fallback message once ``MODEL_OUTAGE_MAX_MS`` has passed, never dead-lettered; a
    fatal failure goes to the DLQ at once."""
    setup = await service_setup(partitions=1)
    tag = uuid.uuid4().hex[:6]
    transient, healthy, always, fatal = (f"{n}-{tag}" for n in
                                         ("transient", "healthy", "always", "fatal"))
    provider = FailingProvider()
    settings = setup.settings(max_retries=2, retry_backoff_ms=400, retry_backoff_max_ms=1000,
                              retry_jitter=0.0, model_outage_max_ms=3000,
                              model_fallback_message="sorry")
    retries_before = metrics.INPUT_RETRIES._value.get()
    async with running_consumer(settings, failing_agent(provider)):
        await setup.produce([
            record(transient, "transient oi"),
            record(always, "always oi"),
            record(fatal, "fatal oi"),
            record(healthy, "oi"),
        ])
        async with setup.reader() as replies:
            values = await replies.until(
                lambda v: {transient, healthy, always} <= {x["session_id"] for x in v}, within=30
            )
            values = await replies.settle(1.0)
        dead = await read_dlq(setup.bootstrap, setup.topics[DLQ], 1)
        async with setup.reader(DLQ) as dlq:
            await dlq.settle(1.0)

    order = [v["session_id"] for v in values]
    assert order.index(healthy) < order.index(transient)
    assert provider.failures["transient oi"] == 2
    # Retried past MAX_RETRIES, for the 3 s the outage bound allows (0.4 + 0.8 + 1.0 s waits),
    # then answered once with the fallback message.
    assert provider.failures["always oi"] == 4
    assert [v["text"] for v in values if v["session_id"] == always] == ["sorry"]
    assert provider.failures["fatal oi"] == 1
    reasons = {r.key.decode(): dict(r.headers)["error"] for r in dead}  # type: ignore[attr-defined]
    assert reasons == {fatal: b"provider-fatal"} and len(dlq.records) == 1
    assert metrics.INPUT_RETRIES._value.get() - retries_before == 2 + 3
