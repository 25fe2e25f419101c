"""Agents as data: a definition document builds the same agent as Python, refuses bad names when
it is checked (naming flow and step), and any document is refused with a reason or accepted."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import FakeClock
from engine.definition import (
    DefinitionError,
    HostHooks,
    build_agent,
    check_definition,
    definition_digest,
    definition_schema,
    parse_definition,
)
from engine.lifecycle.web_search import OfflineWebSearch
from engine.packs import Pack, PackError, PackSet
from engine.providers import RuleProvider
from examples.demo_agent import BOOKINGS
from examples.demo_pack import pack as bike_pack
from tests.examples.host import Conversation, texts

ROOT = Path(__file__).resolve().parents[2]
DEMO = json.loads((ROOT / "examples/agents/demo.json").read_text())
PACKS = PackSet([bike_pack])


def _doc(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(DEMO)
    doc.update(changes)
    return doc


def _refusal(doc: Any, packs: PackSet = PACKS) -> str:
    with pytest.raises(DefinitionError) as caught:
        check_definition(doc, packs)
    return str(caught.value)


async def test_the_demo_document_books_a_repair_like_the_python_agent() -> None:
    BOOKINGS.clear()
    clock = FakeClock("2026-01-05T09:00:00Z")
    agent = build_agent(parse_definition(DEMO), PACKS, provider=RuleProvider(), clock=clock)
    chat = Conversation(agent, clock)
    await chat.say("hi, I'm Rui")
    await chat.say("book a repair: brakes on saturday")
    reply = await chat.say("yes")
    assert any("Booked: brakes on saturday" in t for t in texts(reply)), texts(reply)
    assert len(BOOKINGS) == 1
    BOOKINGS.clear()


def test_errors_name_the_flow_and_the_step() -> None:
    doc = _doc()
    doc["flows"][1]["steps"][0]["collect"] = ["colour"]
    assert _refusal(doc) == "flow 'booking', step 'what': unknown field 'colour'"
    doc = _doc()
    doc["flows"][1]["steps"][9] = {"id": "breath", "wait": {"ms": "soon"}}
    assert _refusal(doc).startswith("flow 'booking', step 'breath': wait.ms:")
    doc = _doc()
    doc["flows"][0]["steps"][2]["if"] = {"shiny": True}
    assert "flow 'welcome', step 'named?': unknown condition 'shiny'" in _refusal(doc)


def test_an_unknown_action_or_pack_is_refused_when_checked() -> None:
    assert _refusal(_doc(packs=[])) == "flow 'booking', step 'book': unknown action 'book_repair'"
    assert _refusal(_doc(packs=["shop"])) == "unknown pack 'shop' (installed: bike_shop)"
    assert "unknown pack" in _refusal(DEMO, PackSet())


def test_tool_handlers_and_backends_come_from_packs_by_name() -> None:
    async def lookup(args: dict[str, Any]) -> Any:
        return {"ok": True}

    web = OfflineWebSearch([{"title": "Bikes", "url": "https://bikes.example/", "snippet": "b"}])
    tools_pack = Pack(name="tools", tools={"lookup": lookup}, web_search={"offline": web})
    packs = PackSet([bike_pack, tools_pack])
    doc = _doc(
        packs=["bike_shop", "tools"],
        tools={"order": {"description": "Look up an order", "handler": "lookup"}},
        lifecycle={"tools": {"web_search": True},
                   "web_search": {"backend": "offline", "allowed_domains": ["bikes.example"]}},
    )
    wrapped: list[Any] = []
    agent = build_agent(
        parse_definition(doc), packs, host=HostHooks(wrap_web_search=lambda b: wrapped.append(b)
                                                     or b)
    )
    assert agent.config.tools["order"].handler is lookup
    assert agent.config.lifecycle is not None and agent.config.lifecycle.web_search is not None
    assert agent.config.lifecycle.web_search.backend is web and wrapped == [web]
    assert agent.config.lifecycle.agent_id == "demo-bike-shop"
    doc["tools"]["order"]["handler"] = "missing"
    assert _refusal(doc, packs) == "tool 'order': no listed pack has the handler 'missing'"
    doc = _doc(packs=["bike_shop"], lifecycle={"web_search": {"backend": "offline"}})
    assert "no listed pack has 'offline'" in _refusal(doc, packs)


def test_two_packs_naming_the_same_action_are_refused() -> None:
    twin = Pack(name="twin", actions={"book_repair": lambda ctx: None})
    with pytest.raises(PackError, match="provided by both"):
        PackSet([bike_pack, twin]).select(["bike_shop", "twin"])
    assert "provided by both" in _refusal(_doc(packs=["bike_shop", "twin"]),
                                          PackSet([bike_pack, twin]))


def test_code_only_settings_cannot_be_smuggled_in() -> None:
    assert "plan_check" in _refusal(_doc(lifecycle={"plan_check": "x"}))
    assert "knowledge_index" in _refusal(_doc(lifecycle={"knowledge_index": "x"}))
    assert "actions" in _refusal(_doc(actions={"book_repair": "os.system"}))


def test_the_digest_ignores_key_order() -> None:
    reordered = dict(reversed(list(DEMO.items())))
    assert definition_digest(reordered) == definition_digest(DEMO)
    assert definition_digest(_doc(name="Bia")) != definition_digest(DEMO)


def test_the_published_schema_is_up_to_date() -> None:
    published = json.loads((ROOT / "docs/agent.schema.json").read_text())
    assert published == definition_schema(), (
        "docs/agent.schema.json is stale: python -m engine.definition > docs/agent.schema.json"
    )
    assert set(published["required"]) == {"agent_id", "workspace", "name"}


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _check_never_crashes(document: Any) -> None:
    try:
        check_definition(document, PACKS)
    except DefinitionError as exc:
        assert str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_any_bytes_or_text_are_refused_with_a_reason(raw: Any) -> None:
    _check_never_crashes(raw)


_PATHS = [
    ("fields",), ("flows",), ("flows", 1), ("flows", 1, "steps"), ("flows", 1, "steps", 7),
    ("flows", 1, "steps", 7, "with"), ("flows", 3, "on"), ("flows", 3, "on", 0, "if"),
    ("flows", 0, "steps", 2, "if"), ("events",), ("packs",), ("name",), ("lifecycle",),
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_PATHS), _json)
def test_any_value_anywhere_in_a_good_document_is_refused_or_accepted(
    path: tuple[Any, ...], value: Any
) -> None:
    doc = _doc()
    target: Any = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    _check_never_crashes(doc)
    _check_never_crashes(json.dumps(doc))


def test_deep_nesting_is_refused_with_a_reason() -> None:
    condition: Any = {"known": "name"}
    for _ in range(5000):
        condition = {"not": condition}
    doc = _doc()
    doc["flows"][0]["steps"][2]["if"] = condition
    assert "nested deeper" in _refusal(doc)


def test_lifecycle_settings_keep_the_engines_own_checks_of_what_was_left_unset() -> None:
    assert "escalation is not set" in _refusal(_doc(lifecycle={"tools": {"handoff": True}}))
    _, agent = check_definition(
        _doc(lifecycle={"tools": {"handoff": True}, "escalation": True}), PACKS
    )
    assert agent.config.lifecycle is not None and agent.config.lifecycle.escalation
    assert agent.config.lifecycle.max_tool_calls == 4  # the engine's default, not restated


def test_one_installed_pack_gives_the_workspace_knowledge() -> None:
    first = Pack(name="kb", workspace_knowledge=lambda workspace: f"index of {workspace}")
    assert PackSet([first]).workspace_knowledge("acme") == "index of acme"
    assert PackSet([bike_pack]).workspace_knowledge("acme") is None
    with pytest.raises(PackError, match="both give the workspace knowledge"):
        PackSet([first, Pack(name="kb2", workspace_knowledge=lambda workspace: None)])
