"""Reading model replies: JSON in ``json`` or in text, aliases mapped back, junk ignored."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from engine import FieldSpec, ModelResponse
from engine.envelopes import UnderstandPlan, parse_speak, parse_understand, reply_json

PLAN = UnderstandPlan(
    flows={"vendas": ["comprar"]},
    mentions={"preco": ["preço"]},
    extract={"preco": {"qtd": FieldSpec(type="integer")}},
    branches={"r1/t/0": "quer humano?", "r1/t/1": "quer cancelar?"},
    fields={"nome": FieldSpec()},
)


def test_json_is_read_from_text_when_not_parsed() -> None:
    """A reply's JSON may arrive as text, fenced or surrounded by prose."""
    fenced = ModelResponse(text='Here:\n```json\n{"message": "Oi", "nome": "Ana"}\n```')
    assert reply_json(fenced) == {"message": "Oi", "nome": "Ana"}
    assert reply_json(ModelResponse(text="no json here")) is None
    assert reply_json(ModelResponse(text="{not json}")) is None
    assert reply_json(ModelResponse(text="[1, 2]")) is None


def test_branch_aliases_map_back_and_junk_is_ignored() -> None:
    """Branch keys travel as short aliases (q1, q2); they are mapped back to
    ${runId}/${stepId}/${index} when the reply is parsed."""
    reply = ModelResponse(
        json={
            "flows": {"vendas": 140, "ghost": 90, "x": "high"},
            "mentions": {"preco": True, "ghost": True},
            "extract": {"preco": {"qtd": 2, "extra": 1}, "ghost": {}},
            "branches": {"q1": False, "q2": True, "q9": True},
            "fields": {"nome": "Ana", "vazio": None, "booking_ref": "FORGED"},
            "data": {"nome": "X"},
        }
    )
    judged = parse_understand(reply, PLAN)
    assert judged.flows == {"vendas": 100}
    assert judged.mentions == {"preco": True}
    assert judged.extract == {"preco": {"qtd": 2}}
    assert judged.branches == {"r1/t/0": False, "r1/t/1": True}
    assert judged.fields == {"nome": "Ana"}
    assert sorted(judged.refused) == sorted([
        "data", "flows.ghost", "flows.x", "mentions.ghost", "extract.preco.extra",
        "extract.ghost", "branches.q9", "fields.booking_ref",
    ])
    assert parse_understand(ModelResponse(text="sorry"), PLAN).usable is False
    assert parse_understand(ModelResponse(json={"flows": [1]}), PLAN).flows == {}


def test_a_flow_score_that_is_no_finite_number_is_no_score() -> None:
    """NaN or an infinity from a provider that decodes its own replies is ignored like any
    other wrong type (``int()`` of it would fail the turn); a huge integer is clamped."""
    reply = ModelResponse(json={"flows": {"vendas": float("nan")}})
    assert parse_understand(reply, PLAN).flows == {}
    for score, expected in ((float("inf"), {}), (float("-inf"), {}), (10**400, {"vendas": 100}),
                            (-(10**400), {"vendas": 0}), (42.9, {"vendas": 42})):
        assert parse_understand(ModelResponse(json={"flows": {"vendas": score}}), PLAN).flows \
            == expected


def test_speak_reply_message_and_values() -> None:
    """The envelope is { message, ...pending fields }; a plain-text reply is the message."""
    reply = ModelResponse(json={"message": " Oi ", "nome": None, "idade": 3})
    assert parse_speak(reply, ["nome", "idade"]) == ("Oi", {"idade": 3}, [])
    assert parse_speak(ModelResponse(text="Só texto")) == ("Só texto", {}, [])
    assert parse_speak(ModelResponse(json={"message": "  "})) == (None, {}, [])
    assert parse_speak(ModelResponse(text="")) == (None, {}, [])


def test_speak_reply_keeps_only_the_offered_fields() -> None:
    """Properties the speak call did not offer are refused by name, whatever the provider sent."""
    reply = ModelResponse(json={"message": "Oi", "idade": 3, "booking_ref": "X", "gone": None})
    assert parse_speak(reply, ["nome"]) == ("Oi", {}, ["idade", "booking_ref"])
    assert parse_speak(reply, ["idade"]) == ("Oi", {"idade": 3}, ["booking_ref"])


# NaN and the infinities included: a provider that decodes its own replies may hand them over.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)
_SECTION_NAMES = st.sampled_from(["flows", "mentions", "extract", "branches", "fields", "x"])
_REPLY = st.dictionaries(
    _SECTION_NAMES | st.text(max_size=8),
    st.dictionaries(st.sampled_from(["vendas", "preco", "q1", "q9", "nome", "booking_ref"])
                    | st.text(max_size=8), _JSON, max_size=5) | _JSON,
    max_size=6,
)


@given(raw=_REPLY, text=st.text())
def test_any_understand_reply_yields_only_offered_names(raw: dict[str, Any], text: str) -> None:
    """Whatever JSON or text a provider returns, the judgement holds only names the plan
    offered, and every other non-null name is listed as refused; parsing never raises."""
    for response in (ModelResponse(json=raw), ModelResponse(text=text)):
        judged = parse_understand(response, PLAN)
        assert set(judged.flows) <= set(PLAN.flows)
        assert all(type(v) is int and 0 <= v <= 100 for v in judged.flows.values())
        assert set(judged.mentions) <= set(PLAN.mentions)
        assert set(judged.extract) <= set(PLAN.extract)
        assert all(set(v) <= set(PLAN.extract[k]) for k, v in judged.extract.items())
        assert set(judged.branches) <= set(PLAN.branches)
        assert set(judged.fields) <= set(PLAN.fields)
        assert all(isinstance(name, str) for name in judged.refused)
    fields = raw.get("fields")
    if isinstance(fields, dict):
        forged = {k for k, v in fields.items() if k not in PLAN.fields and v is not None}
        assert forged == {r.split(".", 1)[1] for r in parse_understand(
            ModelResponse(json=raw), PLAN).refused if r.startswith("fields.")}


@given(raw=st.dictionaries(st.text(max_size=8), _JSON, max_size=6),
       offered=st.lists(st.text(max_size=8), max_size=3))
def test_any_speak_reply_keeps_only_offered_fields(raw: dict[str, Any], offered: list[str]) -> None:
    """A speak reply's values are always a subset of the offered names; the rest are refused."""
    _, values, refused = parse_speak(ModelResponse(json=raw), offered)
    assert set(values) <= set(offered) - {"message"}
    assert set(refused) == {k for k, v in raw.items()
                            if k != "message" and v is not None and k not in offered}
