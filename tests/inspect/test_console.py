"""The test console: a form that writes only a channel's inputs, under ids of its own, refused
without its token; each reply shown with its outcomes and link fixes, every text escaped. The
last test chats through the real consumer and topics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.devchat.client import ObservedTurn, read_dead_letter
from consumer.inspect.console import (
    CONSOLE_PREFIX,
    Console,
    is_console_session,
    new_console_session,
)
from consumer.inspect.web import build_app

INBOUND = "inbound.turns.t"
HOSTILE = "<script>alert(1)</script>"


class _Replies:
    """The reply reader's part the console uses: records by key, as published."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    async def wait_for(self, key: str, within: float) -> dict[str, Any] | None:
        return self.records.get(key)


class _Consumer:
    """A producer that records every write and answers each input as a consumer would: the
    turn observed, its reply published."""

    def __init__(self, replies: _Replies) -> None:
        self.writes: list[tuple[str, bytes, dict[str, Any]]] = []
        self.replies = replies
        self.console: Console | None = None

    async def send_and_wait(self, topic: str, *, key: bytes, value: bytes) -> None:
        request = json.loads(value)
        self.writes.append((topic, key, request))
        reply_key = f"{request['id']}-r"
        self.replies.records[reply_key] = {
            "session_id": request["session_id"], "key": reply_key,
            "text": f"you said {request['message']} see https://shop.example/book",
        }
        result = {
            "messages": [{"key": reply_key}], "llm_calls": 1,
            "outcomes": [{"code": "step_answered", "flow_id": "booking", "step_id": "ask"}],
            "link_fixes": [
                {"action": "removed", "url": "https://evil.example/<b>x</b>"},
                {"action": "repaired", "url": "https://shop.exmple/book",
                 "replacement": "https://shop.example/book"},
            ],
        }
        assert self.console is not None
        asyncio.get_running_loop().call_soon(self.console.observe, ObservedTurn(request, result))


class _Reader:
    """No turn log: the console's page still shows what it observed."""

    async def conversations(self, where: object, **_: object) -> tuple[list[object], None]:
        return [], None

    async def conversation(self, session_id: str, **_: object) -> None:
        return None


def _console() -> tuple[Console, _Consumer]:
    replies = _Replies()
    consumer = _Consumer(replies)
    console = Console(producer=consumer, inbound_topic=INBOUND, replies=replies,  # type: ignore[arg-type]
                      reply_timeout=5)
    consumer.console = console
    return console, consumer


def _client(console: Console) -> httpx.AsyncClient:
    app = build_app(_Reader(), console=console)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://i")


async def _open(client: httpx.AsyncClient) -> tuple[str, str]:
    """Open the console as a person does: a new session, and the form's token."""
    first = await client.get("/console")
    assert first.status_code == 303
    session = first.headers["location"].split("session=", 1)[1]
    page = await client.get(first.headers["location"])
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert page.status_code == 200 and token is not None
    return session, token.group(1)


def test_console_session_ids_are_its_own() -> None:
    ids = {new_console_session() for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith(CONSOLE_PREFIX) for i in ids)
    assert all(is_console_session(i) for i in ids)
    for foreign in ("cust-1", "console-", "console-XYZ", "console-ab/../x", "console-" + "a" * 40,
                    " console-ab", "dev-12345678"):
        assert not is_console_session(foreign), foreign


async def test_a_message_goes_to_the_inbound_topic_only_and_its_turn_is_shown() -> None:
    console, consumer = _console()
    async with _client(console) as client:
        session, token = await _open(client)
        sent = await client.post("/console", data={"session": session, "csrf": token,
                                                   "text": f"hi {HOSTILE}"})
        assert sent.status_code == 303
        page = await client.get(sent.headers["location"].split("#")[0])
    assert [(topic, key) for topic, key, _ in consumer.writes] == [(INBOUND, session.encode())]
    written = consumer.writes[0][2]
    assert set(written) == {"session_id", "message", "id", "at"}
    assert written["session_id"] == session and written["message"] == f"hi {HOSTILE}"
    assert written["id"].startswith(session)
    text = page.text
    assert HOSTILE not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "you said hi" in text and "step_answered" in text and "booking/ask" in text
    assert "https://evil.example/&lt;b&gt;x&lt;/b&gt;" in text  # removed, escaped
    assert re.search(r"<th>removed</th>", text) and re.search(r"<th>repaired</th>", text)
    assert "https://shop.exmple/book" in text
    # The delivered link is the repair's replacement, not a link the check kept as written.
    assert "link-kept" not in text


async def test_a_post_without_the_forms_token_writes_nothing() -> None:
    console, consumer = _console()
    async with _client(console) as client:
        session, token = await _open(client)
        other, _ = await _open(client)
        refused = [
            await client.post("/console", data={"session": session, "text": "x"}),
            await client.post("/console", data={"session": session, "csrf": "0" * 64,
                                                "text": "x"}),
            # A token is bound to its session: another console session's is refused.
            await client.post("/console", data={"session": other, "csrf": token, "text": "x"}),
            await client.post("/console", data={"session": "cust-1", "csrf": token, "text": "x"}),
        ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403]
    assert consumer.writes == []


class _DeadLettering(_Consumer):
    """A consumer that refuses every input to the DLQ, as it does a record it cannot take."""

    async def send_and_wait(self, topic: str, *, key: bytes, value: bytes) -> None:
        self.writes.append((topic, key, json.loads(value)))
        letter = read_dead_letter([("error", b"turn_failed"), ("detail", b"<i>boom</i>")], value)
        assert self.console is not None
        asyncio.get_running_loop().call_soon(self.console.dead_lettered, letter)


async def test_a_dead_lettered_message_is_reported_at_once() -> None:
    replies = _Replies()
    consumer = _DeadLettering(replies)
    console = Console(producer=consumer, inbound_topic=INBOUND, replies=replies,  # type: ignore[arg-type]
                      reply_timeout=120)
    consumer.console = console
    async with _client(console) as client:
        session, token = await _open(client)
        sent = await asyncio.wait_for(
            client.post("/console", data={"session": session, "csrf": token, "text": "hi"}), 10)
        page = await client.get(sent.headers["location"].split("#")[0])
    exchange = console.of(session)[0]
    assert not exchange.answered and exchange.problem is not None
    assert "dead-letter topic (turn_failed: <i>boom</i>)" in exchange.problem
    assert "(turn_failed: &lt;i&gt;boom&lt;/i&gt;)" in page.text


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=120), raw=st.binary(max_size=200))
def test_any_form_is_sent_as_typed_or_refused_with_a_reason(text: str, raw: bytes) -> None:
    """Whatever a form carries: with its token, the message as typed (trimmed) goes out once,
    or nothing goes out and the page says why; a body without the token writes nothing."""

    async def post() -> tuple[int, int, str, list[Any]]:
        console, consumer = _console()
        async with _client(console) as client:
            session, token = await _open(client)
            typed = await client.post("/console", data={"session": session, "csrf": token,
                                                        "text": text})
            forged = await client.post("/console", content=raw, headers={
                "content-type": "application/x-www-form-urlencoded"})
        return typed.status_code, forged.status_code, typed.text, consumer.writes

    typed, forged, page, writes = asyncio.run(post())
    assert forged == 403
    if typed == 303:
        assert [w[2]["message"] for w in writes] == [text.strip()]
    else:
        assert typed == 400 and writes == [] and "plain messages" in page


async def test_the_console_writes_under_its_own_session_ids_only() -> None:
    console, consumer = _console()
    with pytest.raises(ValueError, match="own session ids"):
        await console.send("cust-1", "hello")
    with pytest.raises(ValueError, match="plain messages"):
        await console.send(new_console_session(), "/event paid")
    assert consumer.writes == []


async def test_the_form_goes_through_the_bounded_server() -> None:
    """The console's POST is read by the project's bounded server (its body capped), and the
    same server without the console refuses any POST."""
    from consumer.inspect.serving import CONSOLE_LIMITS, UI_LIMITS, asgi_handler
    from consumer.webserver.server import BoundedHttpServer

    console, consumer = _console()
    app = build_app(_Reader(), console=console)  # type: ignore[arg-type]
    server = await BoundedHttpServer(asgi_handler(app, posts=True), host="127.0.0.1", port=0,
                                     limits=CONSOLE_LIMITS).start()
    plain = await BoundedHttpServer(asgi_handler(app), host="127.0.0.1", port=0,
                                    limits=UI_LIMITS).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            session, token = await _open(client)
            sent = await client.post("/console", data={"session": session, "csrf": token,
                                                       "text": "over the wire"})
            too_big = await client.post("/console", data={"session": session, "csrf": token,
                                                          "text": "x" * 20_000})
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{plain.port}") as client:
            read_only = await client.post("/console", data={"session": session, "csrf": token,
                                                            "text": "x"})
    finally:
        await server.stop()
        await plain.stop()
    assert sent.status_code == 303 and too_big.status_code == 413 and read_only.status_code == 405
    assert [w[2]["message"] for w in consumer.writes] == ["over the wire"]


@pytest.mark.parametrize("missing", ["AGENT", "KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL"])
def test_ui_console_refuses_to_start_without_what_it_needs(
    missing: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from consumer import cli

    env = {"AGENT": "examples.demo_agent:agent", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
           "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    env.pop(missing)
    for name in ("AGENT", "KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL", "INSPECT_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("INSPECT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    assert cli.main(["ui", "--console"]) == 2
    assert "--console needs the agent" in capsys.readouterr().err


async def test_the_inspector_has_no_console_unless_asked() -> None:
    app = build_app(_Reader())  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://i") as client:
        got = await client.get("/console")
        posted = await client.post("/console", data={"text": "x"})
    assert got.status_code == 404 and posted.status_code in (404, 405)


async def test_the_console_chats_through_the_real_consumer(
    kafka_bootstrap: str, database_url: str, kafka_is_embedded: bool
) -> None:
    """Through real topics and the real consumer with the demo agent: the reply comes back,
    the page shows the turn's decision lines read from the turn log."""
    from consumer.inspect.console import open_console
    from consumer.inspect.reading import Reader
    from tests.inspect.filling import agent
    from tests.integration.harness import DLQ, MESSAGES, SCHEDULE, make_settings
    from tests.integration.harness import INBOUND as INBOUND_BASE

    names = {base: base for base in (INBOUND_BASE, MESSAGES, SCHEDULE, DLQ)}
    settings = make_settings(kafka_bootstrap, database_url, names, embedded=kafka_is_embedded)
    reader = Reader(database_url)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(reader.close)
        console = await open_console(settings, agent(), stack, reply_timeout=60)
        app = build_app(reader, console=console)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://i", timeout=90) as client:
            session, token = await _open(client)
            sent = await client.post("/console", data={"session": session, "csrf": token,
                                                       "text": "hello"})
            page = await client.get(sent.headers["location"].split("#")[0])
    exchange = console.of(session)[0]
    assert exchange.problem is None and exchange.answered and exchange.replies
    assert "llm_calls=" in exchange.outcomes
    assert exchange.replies[0].split()[0] in page.text
    assert "the turn is not in the turn log yet" not in page.text
    assert f"/conversations/{session}#t1" in page.text
