"""``turnflow ui`` refuses to expose conversations without a token, and ``turnflow graph`` and
the diagram draw every flow, step and move with every label escaped."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer import cli
from consumer.cli.ui import is_loopback
from consumer.inspect import diagram
from consumer.inspect.options import parse_time
from consumer.inspect.terminal import safe
from engine import Agent, MockProvider


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::", "example.org"])
def test_ui_refuses_a_public_bind_without_a_token(
    host: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.delenv("TURNFLOW_UI_TOKEN", raising=False)
    monkeypatch.delenv("TURNFLOW_UI_TOKEN_FILE", raising=False)
    assert cli.main(["ui", "--host", host]) == 2
    assert "without a token" in capsys.readouterr().err


def test_ui_refuses_a_short_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("TURNFLOW_UI_TOKEN", "short")
    assert cli.main(["ui", "--host", "0.0.0.0"]) == 2
    assert "at least 16" in capsys.readouterr().err


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.1", "localhost.evil"))


def test_graph_writes_the_demo_agents_flows(tmp_path: Path) -> None:
    svg_file, mermaid_file = tmp_path / "flows.svg", tmp_path / "flows.mmd"
    assert cli.main(["graph", "--agent", "examples.demo_agent:agent", "-o", str(svg_file)]) == 0
    assert cli.main(["graph", "--agent", "examples.demo_agent:agent", "-o",
                     str(mermaid_file)]) == 0
    svg = svg_file.read_text()
    assert svg.startswith("<svg") and 'data-step="booking/confirm"' in svg
    assert ">on_correction<" in svg and 'class="flow" data-flow="nudge"' in svg
    assert mermaid_file.read_text().startswith("flowchart TD")


def moving_agent() -> Agent:
    """An agent with every kind of move: next, then, else, on_fail, on_correction, a branch,
    a move to another flow and the end."""
    return Agent(
        name="Moves",
        provider=MockProvider([]),
        fields={"x": {"type": "string", "correctable": True}, "ok": {"type": "boolean"}},
        actions={"act": lambda ctx: None},
        flows=[
            {"id": "a", "on": [{"message": ["go"]}], "steps": [
                {"id": "ask", "collect": ["x"], "on_correction": "ask",
                 "branches": [{"if": {"equals": {"ok": False}}, "then": "act"}]},
                {"id": "known?", "if": {"known": "x"}, "then": "act", "else": "other"},
                {"id": "act", "do": "act", "on_fail": "other"},
                {"id": "other", "say": "bye", "then": {"flow": "b"}},
            ]},
            {"id": "b", "on": [{"silence": 5000}], "steps": [{"id": "only", "say": "hi"}]},
        ],
    )


def test_the_graph_has_every_step_and_move() -> None:
    graph = diagram.flow_graph(moving_agent())
    moves = {(f.id, s.id): {(e.label, e.to_flow, e.to_step) for e in s.edges}
             for f in graph.flows for s in f.steps}
    assert moves == {
        ("a", "ask"): {("next", "a", "known?"), ("on_correction", "a", "ask"),
                       ("branch", "a", "act")},
        ("a", "known?"): {("then", "a", "act"), ("else", "a", "other")},
        ("a", "act"): {("next", "a", "other"), ("on_fail", "a", "other")},
        ("a", "other"): {("then", "b", None)},
        ("b", "only"): {("next", "b", "end")},
    }
    assert graph.flows[0].triggers == ["message: go"]
    assert graph.flows[1].triggers == ["silence: 5 s"]
    path = [("a", "ask"), ("a", "known?"), ("a", "act"), ("a", "other"), ("b", "only")]
    svg = diagram.svg(graph, path)
    assert 'class="step visited current" data-step="b/only"' in svg
    assert 'class="step visited" data-step="a/act"' in svg
    taken = [part for part in svg.split("<g ") if 'class="edge taken"' in part]
    assert {(p.split('data-from="')[1].split('"')[0], p.split('data-to="')[1].split('"')[0])
            for p in taken} == {("a/ask", "a/known?"), ("a/known?", "a/act"),
                                ("a/act", "a/other"), ("a/other", "b/")}
    text = diagram.mermaid(graph, path)
    assert "class n_a__act,n_a__ask,n_a__known_,n_a__other,n_b__only visited" in text
    # the trigger into a/ask, the four moves, and act's on_fail beside its next (both lead to
    # other: the outcome lines cannot tell which was taken, so both are drawn as taken)
    assert text.count("linkStyle") == 6


def test_hostile_names_and_texts_are_escaped_in_both_drawings() -> None:
    evil = '<script>alert(1)</script>"]; click x call alert()'
    agent = Agent(
        name="<b>Evil</b>",
        provider=MockProvider([]),
        flows=[{"id": "f", "name": evil, "on": [{"message": [evil]}],
                "steps": [{"id": "s", "say": evil}]}],
    )
    graph = diagram.flow_graph(agent)
    svg = diagram.svg(graph, [("f", "s")])
    assert "<script" not in svg and "<b>" not in svg and "&lt;script&gt;" in svg
    text = diagram.mermaid(graph)
    assert "<script" not in text and '"]' not in text.replace('"]\n', "").replace('"])', "")


@given(st.text(max_size=60))
def test_time_arguments_parse_or_refuse_with_a_reason(value: str) -> None:
    try:
        parsed = parse_time(value)
    except ValueError as exc:
        assert "ISO 8601" in str(exc) or "out of range" in str(exc) or str(exc)
    else:
        assert parsed.tzinfo is not None


@given(st.text(max_size=200))
def test_terminal_text_never_carries_a_control_character(value: str) -> None:
    shown = safe(value)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in shown)
    assert "\u202e" not in shown


async def test_the_bounded_server_serves_the_asgi_app_read_only() -> None:
    """Pages go through the project's bounded HTTP server: GET answered with the app's status
    and headers, anything that would send a body refused."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from consumer.inspect.serving import UI_LIMITS, asgi_handler
    from consumer.webserver.server import BoundedHttpServer

    async def echo(request: Request) -> PlainTextResponse:
        return PlainTextResponse(f"{request.path_params['rest']}|{request.query_params.get('q')}",
                                 status_code=201, headers={"x-seen": "yes"})

    app = Starlette(routes=[Route("/echo/{rest:path}", echo)])
    server = await BoundedHttpServer(asgi_handler(app), host="127.0.0.1", port=0,
                                     limits=UI_LIMITS).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            got = await client.get("/echo/a%2Fb%20c", params={"q": "<x>"})
            posted = await client.post("/echo/x", content=b"body")
    finally:
        await server.stop()
    assert got.status_code == 201 and got.text == "a/b c|<x>" and got.headers["x-seen"] == "yes"
    assert posted.status_code == 405


class _EmptyReader:
    """A reader of an empty database, for driving the pages without one."""

    async def conversations(self, where: object, **_: object) -> tuple[list[object], None]:
        return [], None

    async def conversation(self, session_id: str, **_: object) -> None:
        return None

    async def erased_at(self, session_id: str) -> None:
        return None


@given(target=st.one_of(
    st.text(max_size=80).map(lambda t: "/" + t),
    st.builds(lambda a, b: f"/{a}?{b}", st.sampled_from(["", "conversations/x", "flows",
                                                           "login", "static/x.css", "healthz"]),
              st.text(max_size=60)),
))
def test_any_request_target_is_answered_without_a_server_error(target: str) -> None:
    """Whatever target a client sends, the served app answers it (a page, a refusal, a
    redirect), never a 500 nor an exception out of the handler."""
    import asyncio

    from consumer.inspect.serving import UI_LIMITS, asgi_handler
    from consumer.inspect.web import build_app
    from consumer.webserver.server import Request

    handler = asgi_handler(build_app(_EmptyReader(), token=None))  # type: ignore[arg-type]

    async def answer() -> int:
        request = Request("GET", target, "HTTP/1.1", (("host", "x"),),
                          asyncio.StreamReader(), UI_LIMITS)
        return (await handler(request)).status

    assert asyncio.run(answer()) in (200, 303, 400, 401, 404, 405)


async def test_a_database_that_does_not_answer_is_a_503_page() -> None:
    import httpx

    from consumer.inspect.reading import Reader
    from consumer.inspect.web import build_app

    reader = Reader("postgresql://nobody@127.0.0.1:1/none", pool_size=1)
    try:
        transport = httpx.ASGITransport(app=build_app(reader))
        async with httpx.AsyncClient(transport=transport, base_url="http://i") as client:
            pages = [await client.get(path) for path in ("/", "/conversations/cust-1")]
    finally:
        await reader.close()
    assert [p.status_code for p in pages] == [503, 503]
    assert all("did not answer" in p.text and "cust-1" not in p.text for p in pages)
