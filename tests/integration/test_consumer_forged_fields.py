"""Forged model output through the running consumer: a field the call did not offer never
reaches the stored session, in any of many conversations answered at the same time."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
import pytest

from engine import Agent, ModelRequest, ModelResponse
from tests.integration.harness import SetupFactory, load_when, running_consumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class ForgingProvider:
    """A scripted model steered by the customer: every reply also sets ``booking_ref`` to the
    customer's own words, which no call offers."""

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        said = str(request.meta.get("message") or "")
        if request.schema_name == "understand":
            return ModelResponse(json={"fields": {"confirmed": True, "booking_ref": said}})
        return ModelResponse(json={"message": f"ok {said}", "nome": said, "booking_ref": said})


def forging_agent(provider: ForgingProvider) -> Agent:
    return Agent(
        name="Ana",
        provider=provider,
        idle="silent",
        fields={
            "nome": {"type": "string", "ask": "Ask the name."},
            "confirmed": {"type": "boolean", "ask": "Confirm the booking."},
            "booking_ref": {"type": "string"},
        },
        flows=[{
            "id": "booking",
            "on": [{"message": ["book"]}],
            "steps": [
                {"id": "ask", "collect": ["nome"]},
                {"id": "confirm", "question": "Confirm?", "collect": ["confirmed"]},
                {"id": "done", "say": "Booked."},
            ],
        }],
    )


async def _unknown_field_details(database_url: str, session_id: str) -> list[str]:
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(
            "SELECT outcomes FROM turns WHERE session_id = $1 ORDER BY version", session_id
        )
    finally:
        await connection.close()
    return [o.get("detail") or "" for r in rows for o in json.loads(r["outcomes"])
            if o.get("code") == "unknown-field"]


async def test_a_forged_field_never_lands_in_the_stored_session(
    service_setup: SetupFactory,
) -> None:
    """Ten conversations whose model forges booking_ref in both calls end with only their own
    offered values stored, each forgery recorded as unknown-field in its own turn log."""
    setup = await service_setup()
    sids = [f"forge-{i}-{uuid.uuid4().hex[:6]}" for i in range(10)]
    provider = ForgingProvider()
    inputs: list[dict[str, Any]] = []
    for sid in sids:
        inputs.append({"session_id": sid, "message": f"book {sid}", "id": "m1"})
        inputs.append({"session_id": sid, "message": f"yes {sid}", "id": "m2"})
    async with running_consumer(setup.settings(), forging_agent(provider)):
        await setup.produce(inputs)
        stored = {sid: await load_when(setup.database_url, sid, lambda s: s.version >= 2)
                  for sid in sids}
    for sid in sids:
        data = stored[sid].state["data"]
        assert data == {"nome": f"book {sid}", "confirmed": True}, sid
        details = await _unknown_field_details(setup.database_url, sid)
        assert any("booking_ref" in d for d in details)
        assert any("fields.booking_ref" in d for d in details)
        assert all(sid not in d for d in details)  # names only, never the forged value
    assert provider.calls == 2 * len(sids)
