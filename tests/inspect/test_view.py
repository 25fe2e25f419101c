"""The view model alone, from rows made here: each timer's state, each message's publication,
the incident marks of a turn, and the path the diagram highlights."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from consumer.inspect import view
from consumer.inspect.reading import ConversationRows

AT = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def _turn(version: int, given: dict[str, Any], **columns: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": "s", "version": version, "input": given, "messages": [], "schedule": [],
        "outcomes": [], "started": [], "ended": [], "skipped": [], "llm_calls": 0,
        "created_at": AT, "clock_at": None, "model_calls": None, "input_id": None,
        "source_topic": "inbound.turns", "source_partition": 0, "source_offset": version,
        "agent_id": None, "agent_version": None,
    }
    row.update(columns)
    return row


def _line(code: str, flow: str | None = None, step: str | None = None, **more: Any) -> dict:
    return {"code": code, "flow_id": flow, "step_id": step, "run_id": "r1" if flow else None,
            "status": more.pop("status", None), "detail": more.pop("detail", None),
            "llm_calls": 0, **more}


def test_timer_states_publication_incidents_and_path() -> None:
    turns = [
        _turn(1, {"message": "hi"}, schedule=[
            {"key": "t-fired", "at": "x", "replaces": None},
            {"key": "t-stale", "at": "x", "replaces": None},
            {"key": "t-replaced", "at": "x", "replaces": None},
        ], messages=[{"kind": "ai", "text": "a", "key": "k1"},
                     {"kind": "verbatim", "text": "b", "key": "k2"}],
            outcomes=[_line("spoke", "f", "ask"), _line("said", "f", "say")]),
        _turn(2, {"wake": "t-fired"}, schedule=[
            {"key": "t-new", "at": "x", "replaces": "t-replaced"},
            {"key": "t-pending", "at": "x", "replaces": None},
        ], outcomes=[_line("resumed", "f", "wait"), _line("handoff", detail="keyword")]),
        _turn(3, {"wake": "t-stale"}, outcomes=[_line("stale-wake", detail="t-stale")]),
        _turn(4, {"message": "x", "burst": [{"message": "first"}]}, agent_id="shop",
              agent_version=3, outcomes=[
            _line("action-failed", "f", "do"),
            _line("billed", detail="not billed (fallback)", credits=0)]),
    ]
    rows = ConversationRows(
        session={"id": "s", "version": 4, "state": {"runs": [], "data": {}},
                 "created_at": AT, "updated_at": AT},
        turns=turns,
        unpublished=[{"id": 9, "topic": "m", "key": "s", "created_at": AT,
                      "payload": {"kind": "verbatim", "key": "k2", "text": "b"}}],
        timers=[{"key": "t-pending", "at": AT}],
        dead_lettered=[], first_version=1, last_version=4,
    )
    model = view.conversation_view(rows)
    states = {t.key: t.state for turn in model.turns for t in turn.timers}
    assert states == {"t-fired": "fired", "t-stale": "stale", "t-replaced": "replaced",
                      "t-new": "not pending", "t-pending": "pending"}
    assert [(m.key, m.published) for m in model.turns[0].sent] == [("k1", True), ("k2", False)]
    assert [t.incidents for t in model.turns] == [[], ["handoff"], [], ["fallback", "error"]]
    assert model.turns[3].text == "first\nx" and model.turns[3].credits == 0
    assert [t.agent for t in model.turns] == [None, None, None, "shop v3"]
    assert model.path == [("f", "ask"), ("f", "say"), ("f", "wait"), ("f", "do")]
    assert view.to_jsonable(model)["turns"][0]["at"] == AT.isoformat()


def test_a_turns_wait_for_its_slot_is_shown_with_its_plan_and_reasons() -> None:
    """A turn that waited for its turn slot says so, in the view, the terminal and the JSON: how
    long, under which plan, and what held it; a turn that did not wait says nothing of it."""
    from consumer.inspect import terminal

    waited = {"waited_ms": 1250, "plan": "free", "why": ["plan-cap", "minute-budget"]}
    turns = [
        _turn(1, {"message": "hi"}, model_calls={"calls": [], "delivery": {"queued": waited}}),
        _turn(2, {"message": "again"}, model_calls={"calls": [], "delivery": {}}),
    ]
    rows = ConversationRows(
        session={"id": "s", "version": 2, "state": {"runs": [], "data": {}},
                 "created_at": AT, "updated_at": AT},
        turns=turns, unpublished=[], timers=[], dead_lettered=[], first_version=1,
        last_version=2,
    )
    model = view.conversation_view(rows)
    first, second = model.turns
    assert first.queued == waited and second.queued is None and second.waited is None
    assert first.waited == (
        "waited 1250 ms for a turn slot (plan free): its plan's turns in flight were at their "
        "cap; its plan's model turns for the minute were spent"
    )
    text = terminal.conversation_text(model)
    assert "waited 1250 ms for a turn slot (plan free)" in text
    assert view.to_jsonable(model)["turns"][0]["queued"] == waited


def test_cached_prompt_tokens_are_shown_where_the_turn_log_has_them() -> None:
    """A recorded call with ``cache_read_tokens`` shows them beside its tokens in the view,
    the terminal text, the JSON and the web page; a call without them (a server that does not
    say) shows no cache figure anywhere."""
    import asyncio

    import httpx

    from consumer.inspect import terminal
    from consumer.inspect.web import build_app

    def call(kind: str, **tokens: int) -> dict[str, Any]:
        return {"kind": kind, "ok": True, "reply": {"json": {"message": "oi"}},
                "latency_ms": 812.5, "input_tokens": 900, "output_tokens": 21, **tokens}

    turns = [
        _turn(1, {"message": "hi"}, model_calls={"calls": [
            call("understand", cache_read_tokens=870), call("speak")]}),
    ]
    rows = ConversationRows(
        session={"id": "s", "version": 1, "state": {"runs": [], "data": {}},
                 "created_at": AT, "updated_at": AT},
        turns=turns, unpublished=[], timers=[], dead_lettered=[], first_version=1,
        last_version=1,
    )
    model = view.conversation_view(rows)
    understood, spoken = model.turns[0].understood
    assert understood["cache_read_tokens"] == 870 and spoken["cache_read_tokens"] is None
    text = terminal.conversation_text(model)
    assert "understand: " in text and "900 in / 21 out tokens, 870 cached]" in text
    assert text.count("cached") == 1
    assert view.to_jsonable(model)["turns"][0]["understood"][0]["cache_read_tokens"] == 870

    class OneConversation:
        async def conversation(self, session_id: str, **_: object) -> ConversationRows:
            return rows

    async def page() -> str:
        transport = httpx.ASGITransport(app=build_app(OneConversation()))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://i") as client:
            return (await client.get("/conversations/s")).text

    html = asyncio.run(page())
    assert "900 in / 21 out tokens · <span class=\"cached\"" in html
    assert html.count("870 cached") == 1 and html.count(" cached</span>") == 1
