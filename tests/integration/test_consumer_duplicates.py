"""Duplicate inputs through the consumer: an input id a conversation already had is answered
once, however many inputs came since and at whatever offset it is produced again."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.harness import (
    RecordingAgent,
    SetupFactory,
    counting_agent,
    running_consumer,
    verbatim_texts,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LATER = 55  # more than the session's in-state ring of recent input ids


def numbered(session_id: str, n: int, label: str | None = None) -> dict[str, Any]:
    """Message ``m<n>`` of a conversation; every conversation uses the same ids."""
    label = label or f"t{n}"
    return {"session_id": session_id, "message": label, "id": f"m{n}",
            "context": {"label": label}}


async def test_an_input_older_than_fifty_later_ones_gets_no_second_reply(
    service_setup: SetupFactory,
) -> None:
    """Conversations sharing message ids each answer every id once: re-producing m0 after 55
    later inputs (a DLQ re-drive days later) reaches no agent and sends nothing, while the
    next new input continues each count where it was."""
    setup = await service_setup()
    sids = [f"dup-{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
    agent = RecordingAgent(counting_agent())
    first: list[dict[str, Any]] = []
    for n in range(LATER + 1):
        first += [numbered(sid, n) for sid in sids]
    copies = [numbered(sid, 0, "copy") for sid in sids]
    last = [numbered(sid, LATER + 1) for sid in sids]
    async with running_consumer(setup.settings(), agent):
        await setup.produce(first)
        async with setup.reader() as replies:
            await replies.until(
                lambda v: all(len(verbatim_texts(v).get(s, [])) >= LATER + 1 for s in sids),
                within=150,
            )
            await setup.produce(copies + last)
            values = await replies.until(
                lambda v: all(len(verbatim_texts(v).get(s, [])) >= LATER + 2 for s in sids)
            )
            values = await replies.settle(1.0)
    texts = verbatim_texts(values)
    for sid in sids:
        expected = [f"{n + 1}:t{n}" for n in range(LATER + 2)]
        assert texts[sid] == expected, sid
        assert [c for c in agent.calls if c[0] == sid].count((sid, "m0")) == 1
        assert {v["version"] for v in values
                if v["session_id"] == sid and v["input_id"] == "m0"} == {1}
