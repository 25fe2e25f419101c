"""Model replies that write what they were not asked: each envelope section keeps offered names.

A model's reply can be steered by what the customer types, and a provider may ignore the
schema. Whatever comes back, a name the call did not offer is never applied; each one is
recorded as ``unknown-field`` naming the section and the name (never the value).
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine import Agent, FakeClock, MockProvider, ModelRequest, ModelResponse, TurnResult
from tests.scenarios.support import START, codes

FIELDS: dict[str, Any] = {
    "confirmed": {"type": "boolean", "ask": "Confirm the booking."},
    "booking_ref": {"type": "string"},
    "nome": {"type": "string", "ask": "Ask the name."},
}

BOOKING = {
    "id": "booking",
    "on": [{"message": ["book a table"]}],
    "steps": [
        {"id": "confirm", "question": "Shall I confirm?", "collect": ["confirmed"],
         "branches": [{"when": "the customer wants a human", "then": "human"}]},
        {"id": "done", "say": "Booked."},
        {"id": "human", "say": "A colleague will call you."},
    ],
}
# Never offered by a message: it starts only on an event, so no score may start it.
ADMIN = {"id": "admin", "on": [{"event": "admin.open"}], "steps": [{"id": "a", "say": "Admin."}]}


def build(provider: Any, **config: Any) -> Agent:
    config.setdefault("fields", FIELDS)
    config.setdefault("idle", "silent")
    config.setdefault("flows", [BOOKING, ADMIN])
    config.setdefault("events", {"admin.open": {}})
    return Agent(name="Ana", provider=provider, clock=FakeClock(START), **config)


def message(session_id: str, text: str, msg_id: str, session: Any = None) -> dict[str, Any]:
    return {"session_id": session_id, "message": text, "id": msg_id, "session": session}


def unknown_details(result: TurnResult) -> list[str]:
    return [o.detail or "" for o in result.outcomes if o.code == "unknown-field"]


async def asking(agent: Agent, session_id: str = "s1") -> TurnResult:
    """The booking run asks its question (no model call: a lone flow starts on its own)."""
    first = await agent.turn(message(session_id, "book a table", "m1"))
    (run,) = first.session.runs
    assert (run.step_id, run.status) == ("confirm", "asking")
    return first


async def test_understand_field_not_offered_is_never_written() -> None:
    """A forged understand `fields` entry for a known but unoffered field is dropped as unknown-field."""  # noqa: E501
    provider = MockProvider(
        [{"fields": {"confirmed": True, "booking_ref": "FORGED-REF"}, "branches": {"q1": False}}]
    )
    agent = build(provider)
    first = await asking(agent)
    second = await agent.turn(message("s1", "yes; also set booking_ref", "m2", first.session))
    (call,) = provider.calls
    assert set(call.json_schema["properties"]["fields"]["properties"]) == {"confirmed"}
    assert second.session.data == {"confirmed": True}
    assert "unknown-field" in codes(second)
    assert any("fields.booking_ref" in d for d in unknown_details(second))
    assert all("FORGED" not in d for d in unknown_details(second))


async def test_every_understand_section_refuses_names_it_did_not_offer() -> None:
    """Forged flows scores, mentions, extract params and branch answers are not applied and are each recorded."""  # noqa: E501
    forged = {
        "flows": {"admin": 100},
        "mentions": {"admin": True},
        "extract": {"admin": {"x": 1}, "booking": {"booking_ref": "R"}},
        "branches": {"q1": False, "q7": True},
        "fields": {"confirmed": None, "nome": "Eve"},
        "session": {"data": {"booking_ref": "R"}},
    }
    provider = MockProvider([forged])
    agent = build(provider)
    first = await asking(agent)
    second = await agent.turn(message("s1", "hmm", "m2", first.session))
    assert second.session.data == {}
    assert [r.flow_id for r in second.session.runs] == ["booking"]
    assert [s.flow_id for s in second.started] == []
    refused = unknown_details(second)
    for name in ("flows.admin", "mentions.admin", "extract.admin", "extract.booking",
                 "branches.q7", "fields.nome", "'session'"):
        assert any(name in d for d in refused), (name, refused)
    assert not any("q1" in d for d in refused)  # offered and answered: not refused


async def test_speak_field_not_offered_is_never_written() -> None:
    """A speak envelope may write only the pending fields of its step; others are unknown-field."""
    flows = [{"id": "signup", "on": [{"message": []}],
              "steps": [{"id": "ask", "collect": ["nome"]}]}]
    provider = MockProvider(
        [{"message": "Thanks!", "nome": "Ana", "booking_ref": "FORGED", "confirmed": True}]
    )
    agent = build(provider, flows=flows)
    result = await agent.turn(message("s1", "I am Ana", "m1"))
    assert result.session.data == {"nome": "Ana"}
    refused = unknown_details(result)
    assert any("booking_ref" in d for d in refused) and any("confirmed" in d for d in refused)
    assert all("FORGED" not in d for d in refused)


async def test_idle_speak_writes_no_field_at_all() -> None:
    """The idle speaker is offered no field, so every property besides the message is refused."""
    provider = MockProvider([{"message": "Hello!", "nome": "Mallory", "confirmed": True}])
    agent = build(provider, idle=None, flows=[ADMIN])
    result = await agent.turn(message("s1", "hi", "m1"))
    assert [m.text for m in result.messages] == ["Hello!"]
    assert result.session.data == {}
    assert len(unknown_details(result)) == 2


async def test_a_flood_of_forged_names_is_recorded_bounded() -> None:
    """Thousands of made-up names become a few outcomes and a count, and none is written."""
    forged = {f"k{i}": i for i in range(5000)}
    provider = MockProvider([{"fields": {"confirmed": True, **forged}}])
    agent = build(provider)
    first = await asking(agent)
    second = await agent.turn(message("s1", "yes", "m2", first.session))
    assert second.session.data == {"confirmed": True}
    refused = unknown_details(second)
    assert len(refused) == 11
    assert "4990 more" in refused[-1]


def _steered(request: ModelRequest) -> ModelResponse:
    """A model steered by the customer: it copies the customer's words into every property."""
    said = str(request.meta.get("message") or "")
    if request.schema_name == "understand":
        return ModelResponse(json={"fields": {"confirmed": True, "booking_ref": said}})
    return ModelResponse(json={"message": f"ok {said}", "nome": said, "booking_ref": said})


async def test_many_conversations_forging_at_once_keep_their_own_state() -> None:
    """Forty conversations forging fields at the same time each keep only their own offered values."""  # noqa: E501
    ids = [f"c{i}" for i in range(40)]
    signup = {"id": "signup", "on": [{"message": ["sign me up"]}],
              "steps": [{"id": "ask", "collect": ["nome"]}, {"id": "book", "question": "Confirm?",
                                                           "collect": ["confirmed"]}]}
    provider = MockProvider([_steered] * (len(ids) * 2))
    agent = build(provider, flows=[signup])
    firsts = await asyncio.gather(
        *(agent.turn(message(sid, f"sign me up {sid}", "m1")) for sid in ids)
    )
    seconds = await asyncio.gather(
        *(agent.turn(message(sid, f"yes {sid}", "m2", f.session))
          for sid, f in zip(ids, firsts, strict=True))
    )
    for sid, first, second in zip(ids, firsts, seconds, strict=True):
        assert first.session.id == second.session.id == sid
        assert first.session.data == {"nome": f"sign me up {sid}"}
        assert [m.text for m in first.messages] == [f"ok sign me up {sid}"]
        assert second.session.data == {"nome": f"sign me up {sid}", "confirmed": True}
        assert second.session.runs == []
        assert any("booking_ref" in d for d in unknown_details(first))
        assert any("fields.booking_ref" in d for d in unknown_details(second))
    assert len(provider.calls) == 2 * len(ids)


CLEARING = [
    {"id": "perfil", "on": [{"message": ["my profile"]}], "clear_on_start": ["cidade"],
     "steps": [{"id": "d", "question": "Tell me more?", "collect": ["cidade"]}]},
    {"id": "suporte", "on": [{"message": ["problem"]}], "steps": [{"id": "b", "say": "Support!"}]},
]


async def test_a_known_field_offered_for_clear_on_start_lands_only_if_cleared() -> None:
    """A known field is offered when a candidate would clear it, and written only if that
    candidate started; otherwise the stored value stays."""
    fields = {"cidade": {"type": "string", "extract": "anywhere"}}
    stored = {"id": "s1", "v": 4, "version": 0, "data": {"cidade": "Olinda"}, "runs": [],
              "claims": {}, "inputs": [], "metadata": {}}
    other = MockProvider([{"flows": {"perfil": 0, "suporte": 90}, "fields": {"cidade": "Recife"}}])
    kept = await build(other, fields=fields, flows=CLEARING).turn(
        message("s1", "problem", "m1", stored)
    )
    assert "cidade" in other.calls[0].json_schema["properties"]["fields"]["properties"]
    assert [r.flow_id for r in kept.started] == ["suporte"]
    assert kept.session.data == {"cidade": "Olinda"}
    same = MockProvider([{"flows": {"perfil": 90, "suporte": 0}, "fields": {"cidade": "Recife"}}])
    moved = await build(same, fields=fields, flows=CLEARING).turn(
        message("s1", "my profile, now in Recife", "m1", stored)
    )
    assert moved.session.data == {"cidade": "Recife"}
