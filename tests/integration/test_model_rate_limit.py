"""A model provider's 429 holds every conversation back once: the real consumer in front of the
stand-in OpenAI-compatible server answering one request 429 with ``Retry-After``."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from consumer import metrics
from tests.integration.harness import SetupFactory, running_consumer, wait_until
from tests.integration.test_model_outages import (
    FALLBACK,
    dead_letters,
    fallbacks,
    message,
    model_agent,
    replies,
    stand_in,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

RETRY_AFTER_S = 2.0


async def test_a_rate_limit_answer_holds_every_conversation_back_once(
    service_setup: SetupFactory, tmp_path: Path
) -> None:
    """One conversation's model call is answered 429 with ``Retry-After: 2``; ten other
    conversations write right after. The model is asked nothing more until the two seconds
    have passed (the shared back-off, not each conversation finding out on its own); then
    every conversation, the limited one included, is answered once, in order, with no dead
    letter, no fallback and one back-off counted."""
    setup = await service_setup(partitions=3)
    tag = uuid.uuid4().hex[:6]
    limited = f"limited-{tag}"
    others = [f"other-{tag}-{i}" for i in range(10)]
    arrivals = tmp_path / "arrivals"
    settings = setup.settings(retry_backoff_ms=100, retry_backoff_max_ms=5000,
                              model_outage_max_ms=60_000, model_fallback_message=FALLBACK)
    backoffs = metrics.MODEL_BACKOFFS._value.get()
    unavailable = fallbacks("model-unavailable")
    async with stand_in(rate_limit="ratelimit", retry_after=RETRY_AFTER_S,
                        arrivals=str(arrivals)) as server, setup.reader() as out:
        async with running_consumer(settings, model_agent(server.base_url)):
            await setup.produce([message(limited, "ratelimit me")])
            await wait_until(lambda: metrics.MODEL_BACKOFFS._value.get() > backoffs)
            await setup.produce([message(sid, "hello") for sid in others])
            await out.until(lambda v: len(replies(v)) == len(others) + 1, within=40)
            await out.settle(1.0)
    calls = [(float(at), status) for at, status in
             (line.split() for line in arrivals.read_text().splitlines())]
    [limited_at] = [at for at, status in calls if status == "429"]
    during = [at for at, _ in calls if limited_at < at < limited_at + RETRY_AFTER_S - 0.1]
    assert during == [], f"{len(during)} model calls during the back-off"
    assert len(calls) > 2 * len(others)  # the others were asked after it
    got = replies(out.values)
    assert got[limited] == ["echo: ratelimit me"]
    for sid in others:
        assert got[sid] == ["echo: hello"], sid
    assert await dead_letters(setup) == 0
    assert fallbacks("model-unavailable") == unavailable
    assert metrics.MODEL_BACKOFFS._value.get() == backoffs + 1
