"""Each turn's trace in the inspector: its trace id on the web page and in ``turnflow
inspect``, a link into the trace UI when ``TURNFLOW_TRACE_URL`` names one, plain text
otherwise, and a ``TURNFLOW_TRACE_URL`` that cannot be used refused with one line."""

from __future__ import annotations

import dataclasses
import uuid
from urllib.parse import quote

import httpx
import pytest

from consumer import cli
from consumer.inspect import terminal, view
from consumer.inspect.options import trace_link, trace_url
from consumer.inspect.reading import Reader
from consumer.inspect.web import build_app
from store import Store
from tests.store.builders import save_request

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TEMPLATE = "http://localhost:6006/projects/default/traces/{trace_id}"


async def _conversation(database_url: str) -> str:
    """A conversation of two turns, the first traced and the second not (tracing was off)."""
    session_id = f"traced-{uuid.uuid4().hex[:8]}"
    store = await Store.connect(database_url, pool_size=1)
    try:
        await store.save_turn(dataclasses.replace(
            save_request(session_id, 0, replies=["Olá!"]),
            traceparent=f"00-{TRACE}-00f067aa0ba902b7-01"))
        await store.save_turn(save_request(session_id, 1, replies=["Tudo bem?"]))
    finally:
        await store.close()
    return session_id


async def _page(database_url: str, session_id: str, template: str | None) -> str:
    reader = Reader(database_url, pool_size=1)
    try:
        app = build_app(reader, trace_url=template)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            response = await client.get(f"/conversations/{quote(session_id, safe='')}")
    finally:
        await reader.close()
    assert response.status_code == 200
    return response.text


async def test_a_traced_turn_links_to_its_trace_and_an_untraced_one_shows_none(
    database_url: str,
) -> None:
    """With a trace-UI template the traced turn's page links to its trace; without one it shows
    the trace id as text; the untraced turn shows no trace at all; the terminal view the same."""
    session_id = await _conversation(database_url)
    linked = await _page(database_url, session_id, TEMPLATE)
    assert f'<a class="trace-link" href="{TEMPLATE.format(trace_id=TRACE)}"' in linked
    assert linked.count("trace-link") == 1
    plain = await _page(database_url, session_id, None)
    assert f'<code class="trace-id">{TRACE}</code>' in plain and "trace-link" not in plain
    assert plain.count("trace-id") == 1

    reader = Reader(database_url, pool_size=1)
    try:
        rows = await reader.conversation(session_id, turns=10)
    finally:
        await reader.close()
    assert rows is not None
    model = view.conversation_view(rows, trace_url=TEMPLATE)
    assert [(t.trace_id, t.trace_url) for t in model.turns] == [
        (TRACE, TEMPLATE.format(trace_id=TRACE)), (None, None)]
    text = terminal.conversation_text(model)
    assert f"trace       {TRACE} {TEMPLATE.format(trace_id=TRACE)}" in text
    assert text.count("trace  ") == 1
    unlinked = terminal.conversation_text(view.conversation_view(rows))
    assert TRACE in unlinked and "http://" not in unlinked


def test_a_trace_link_needs_a_template_and_a_well_formed_id() -> None:
    """A link is made only from a template and a 32-hex-digit trace id."""
    assert trace_link(TEMPLATE, TRACE) == TEMPLATE.replace("{trace_id}", TRACE)
    assert trace_link(None, TRACE) is None
    assert trace_link(TEMPLATE, None) is None
    assert trace_link(TEMPLATE, "javascript:alert(1)") is None
    assert trace_link(TEMPLATE, TRACE.upper()) is None


@pytest.mark.parametrize(("value", "problem"), [
    ("http://localhost:6006/traces/", "{trace_id}"),
    ("javascript:alert('{trace_id}')", "http"),
])
def test_an_unusable_trace_url_is_refused_with_one_line(
    value: str, problem: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``TURNFLOW_TRACE_URL`` without ``{trace_id}`` or not http(s): ``turnflow inspect`` and
    ``turnflow ui`` exit 2 with one line naming the variable."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("TURNFLOW_TRACE_URL", value)
    with pytest.raises(ValueError, match="TURNFLOW_TRACE_URL"):
        trace_url()
    for argv in (["inspect", "some-session"], ["ui"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "TURNFLOW_TRACE_URL" in err and problem in err and "\n" not in err
    monkeypatch.setenv("TURNFLOW_TRACE_URL", " ")
    assert trace_url() is None
