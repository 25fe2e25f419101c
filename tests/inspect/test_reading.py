"""The inspector's read side over a database the real consumer filled: the list's filters and
paging, a conversation turn by turn, read-only transactions, and the CLI and web views of it."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

from consumer import cli
from consumer.inspect import view
from consumer.inspect.reading import Cursor, ListFilter, Reader
from consumer.inspect.web import build_app
from engine.providers.rules import RuleProvider
from examples.demo_agent import build_agent
from store.urls import async_url
from tests.inspect.conftest import Filled
from tests.inspect.filling import BAD_AT, HOSTILE

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def _mine(reader: Reader, filled: Filled, where: ListFilter) -> list[str]:
    """Every conversation of this module the filter lists, walking the pages (3 a page)."""
    out: list[str] = []
    after = None
    while True:
        rows, after = await reader.conversations(where, limit=3, after=after)
        out.extend(r.session_id for r in rows if r.session_id.startswith(filled.prefix))
        if after is None:
            return out


async def test_each_outcome_filter_lists_exactly_those_conversations(filled: Filled) -> None:
    reader = Reader(filled.database_url)
    try:
        handoffs = await _mine(reader, filled, ListFilter(outcome="handoff"))
        dead = await _mine(reader, filled, ListFilter(outcome="dead-lettered"))
        hours = await _mine(reader, filled, ListFilter(flow="hours"))
        errors = await _mine(reader, filled, ListFilter(outcome="error"))
        by_agent = await _mine(reader, filled, ListFilter(agent="Ana"))
        nobody = await _mine(reader, filled, ListFilter(agent="Someone else"))
        future = await _mine(reader, filled, ListFilter(
            outcome="handoff", since=datetime.now(UTC) + timedelta(hours=1)))
    finally:
        await reader.close()
    assert sorted(handoffs) == sorted(filled.sessions["handoff"])
    reader = Reader(filled.database_url)
    try:
        rows, _ = await reader.conversations(ListFilter(outcome="handoff"), limit=500)
    finally:
        await reader.close()
    items = {r.session_id: view.list_item(r) for r in rows}
    assert all(items[sid].with_person and items[sid].incidents == ["handoff"]
               for sid in filled.sessions["handoff"])
    # the reason column: why each was handed over
    assert all(items[sid].handoff_reason == "keyword" for sid in filled.sessions["handoff"])
    reader = Reader(filled.database_url)
    try:
        every, _ = await reader.conversations(ListFilter(), limit=500)
    finally:
        await reader.close()
    # the last customer message, not the last input (the booking's last input is an event)
    booked = {view.list_item(r).last_text for r in every
              if r.session_id in filled.sessions["booked"]}
    assert booked == {"yes"}
    assert sorted(dead) == sorted(
        filled.sessions["refused"] + filled.sessions["lost"] + [f"{filled.prefix}bad-at"])
    assert sorted(hours) == sorted(filled.sessions["hours"])
    assert errors == []  # no action failed and nothing was deferred
    assert sorted(by_agent) == sorted(filled.all())
    assert nobody == [] and future == []


async def test_paging_visits_every_conversation_once_most_recent_first(filled: Filled) -> None:
    reader = Reader(filled.database_url)
    try:
        seen: list[tuple[datetime, str]] = []
        after = None
        while True:
            rows, after = await reader.conversations(ListFilter(), limit=4, after=after)
            seen.extend((r.at, r.session_id) for r in rows)
            if after is None:
                break
    finally:
        await reader.close()
    mine = [sid for _, sid in seen if sid.startswith(filled.prefix)]
    assert sorted(mine) == sorted(filled.all()) and len(mine) == len(set(mine))
    assert seen == sorted(seen, reverse=True)


async def test_a_conversation_reads_turn_by_turn_with_the_correction_and_its_path(
    filled: Filled,
) -> None:
    sid = filled.sessions["wrong-day"][0]
    reader = Reader(filled.database_url)
    try:
        rows = await reader.conversation(sid)
        last_two = await reader.conversation(sid, turns=2)
        from_second = await reader.conversation(sid, turns=1, from_version=2)
        path = view.path(await reader.outcome_lines(sid))
        missing = await reader.conversation(filled.prefix + "nobody")
    finally:
        await reader.close()
    assert rows is not None and last_two is not None and from_second is not None
    model = view.conversation_view(rows)
    assert [t.version for t in model.turns] == [1, 2, 3, 4] and model.turns_total == 4
    assert [t.text for t in model.turns] == [
        "book a repair", "a tune-up on friday", "actually, saturday", "yes"]
    second, third = model.turns[1], model.turns[2]
    # why the day changed: the code's own line, on the booking flow, naming the field
    assert any(line.code == "corrected" and line.detail == "day" and line.flow == "booking"
               for line in third.decided)
    assert "friday" in " ".join(m.text for m in second.sent)
    assert "saturday" in " ".join(m.text for m in third.sent)
    assert third.understood and third.understood[0]["kind"] == "understand"
    assert third.understood[0]["json"]["fields"]["day"] == "saturday"
    assert all(m.published for t in model.turns for m in t.sent)  # the consumer sent them
    assert model.turns[3].credits == 1 and "R-" in model.turns[3].sent[0].text
    assert [t.version for t in view.conversation_view(last_two).turns] == [3, 4]
    assert [t.version for t in view.conversation_view(from_second).turns] == [2]
    assert path[0] == ("booking", "what") and ("booking", "book") in path
    assert model.path == path  # the page's path is the one its turns' lines name
    assert missing is None


async def test_a_handoff_and_a_dead_lettered_input_are_shown_where_they_happened(
    filled: Filled,
) -> None:
    reader = Reader(filled.database_url)
    try:
        handoff = await reader.conversation(filled.sessions["handoff"][0])
        refused = await reader.conversation(filled.sessions["refused"][0])
    finally:
        await reader.close()
    assert handoff is not None and refused is not None
    turns = view.conversation_view(handoff).turns
    assert [t.incidents for t in turns] == [[], ["handoff"], []]
    assert turns[1].sent[0].kind == "handoff" and turns[1].sent[0].handoff["reason"] == "keyword"
    assert any(line.code == "handed-off" for line in turns[2].decided) and not turns[2].sent
    dead = view.conversation_view(refused)
    assert [d["reason"] for d in dead.dead_lettered] == ["provider-fatal"]
    assert [t.text for t in dead.turns] == ["hi", "hello"]
    # in the timeline where it happened: between the two turns that were answered
    assert [len(t.dead_before) for t in dead.turns] == [0, 1] and dead.dead_after == []
    reader = Reader(filled.database_url)
    try:
        lost = await reader.conversation(filled.sessions["lost"][0])
        listed, _ = await reader.conversations(ListFilter(outcome="dead-lettered"), limit=500)
    finally:
        await reader.close()
    assert lost is not None  # never answered: no turn, no session, its dead letter shown
    never = view.conversation_view(lost)
    assert never.turns == [] and never.turns_total == 0 and len(never.dead_after) == 1
    assert [d["reason"] for d in never.dead_lettered] == ["provider-fatal"]
    row = next(r for r in listed if r.session_id == filled.sessions["lost"][0])
    assert row.turns == 0 and view.list_item(row).incidents == ["dead-lettered"]


async def test_pending_timers_and_unpublished_rows_are_shown_as_such(filled: Filled) -> None:
    """A reply whose outbox row the relay has not published yet, and a timer the scheduler
    holds, are marked on the turn that wrote them and listed as pending."""
    import asyncpg

    from store.urls import plain_url

    sid = filled.sessions["hours"][1]
    connection = await asyncpg.connect(plain_url(filled.database_url))
    try:
        messages = json.loads(await connection.fetchval(
            "SELECT messages FROM turns WHERE session_id = $1 AND version = 1", sid))
        schedule = json.loads(await connection.fetchval(
            "SELECT schedule FROM turns WHERE session_id = $1 AND version = 1", sid))
        await connection.execute(
            "INSERT INTO outbox (session_id, topic, key, payload) VALUES ($1, 'outbound.messages',"
            " $1, $2::jsonb)", sid, json.dumps({**messages[0], "session_id": sid}))
        await connection.execute(
            "INSERT INTO timers (key, session_id, at) VALUES ($1, $2, now() + interval '1 hour')",
            schedule[0]["key"], sid)
    finally:
        await connection.close()
    reader = Reader(filled.database_url)
    try:
        rows = await reader.conversation(sid)
    finally:
        await reader.close()
    assert rows is not None
    model = view.conversation_view(rows)
    assert [m.published for m in model.turns[0].sent] == [False]
    assert [t.state for t in model.turns[0].timers] == ["pending"]
    assert [t["key"] for t in model.pending_timers] == [schedule[0]["key"]]
    assert [u["key"] for u in model.unpublished] == [messages[0]["key"]]
    other = filled.sessions["hours"][2]
    reader = Reader(filled.database_url)
    try:
        untouched = await reader.conversation(other)
    finally:
        await reader.close()
    assert untouched is not None  # nothing of one conversation shows on another
    assert view.conversation_view(untouched).unpublished == []
    assert view.conversation_view(untouched).pending_timers == []


async def test_the_readers_queries_are_never_jit_compiled(filled: Filled) -> None:
    """On a log of millions of turns a search's estimated cost passes ``jit_above_cost`` and
    compiling it cost more than running it: the reader's connections run without JIT, even
    where the server would compile everything."""
    reader = Reader(filled.database_url)
    try:
        async with reader._reading() as connection:
            assert (await connection.execute(text("SHOW jit"))).scalar_one() == "off"
            await connection.execute(text("SET LOCAL jit_above_cost = 0"))
            plan = (await connection.execute(
                text("EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM turns"))).scalar_one()
            assert "JIT" not in (plan if isinstance(plan, str) else json.dumps(plan))
        async with reader._statement() as connection:
            assert (await connection.execute(text("SHOW jit"))).scalar_one() == "off"
        assert (await reader.search("cliente")).query == "cliente"
    finally:
        await reader.close()


async def test_the_reader_cannot_write(filled: Filled) -> None:
    reader = Reader(filled.database_url)
    try:
        async with reader._reading() as connection:
            with pytest.raises(DBAPIError, match="read-only"):
                await connection.execute(text("DELETE FROM sessions"))
        async with reader._statement() as connection:  # outside an explicit transaction too
            with pytest.raises(DBAPIError, match="read-only"):
                await connection.execute(text("DELETE FROM sessions"))
    finally:
        await reader.close()
    reader = Reader(filled.database_url)
    try:
        rows, _ = await reader.conversations(ListFilter(), limit=500)
    finally:
        await reader.close()
    assert filled.all() <= {r.session_id for r in rows}


def _cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str,
         *args: str) -> tuple[int, str, str]:
    monkeypatch.delenv("INSPECT_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", url)
    code = cli.main(["inspect", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_cli_prints_a_conversation_the_list_and_json(
    filled: Filled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = filled.sessions["wrong-day"][0]
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, sid)
    assert code == 0 and "corrected booking/" in out and "(day)" in out and "\x1b[" not in out
    assert out.index("#1 ") < out.index("#2 ") < out.index("#4 ")
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, sid, "--json", "--turns", "1")
    document = json.loads(out)
    assert code == 0 and [t["version"] for t in document["turns"]] == [4]
    assert any(line["code"] == "action-ok" for line in document["turns"][0]["decided"])
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, "--outcome", "handoff",
                        "--json", "--limit", "500")
    listed = {c["session_id"] for c in json.loads(out)["conversations"]}
    assert code == 0 and set(filled.sessions["handoff"]) <= listed
    assert not listed & set(filled.sessions["booked"])
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, sid, "--colour", "always")
    assert "\x1b[1m" in out
    code, _, err = _cli(monkeypatch, capsys, filled.database_url, filled.prefix + "nobody")
    assert code == 3 and "no conversation" in err
    code, _, err = _cli(monkeypatch, capsys, filled.database_url, "--flow", "a\x00")
    assert code == 2 and "flow: not a name" in err
    code, _, err = _cli(monkeypatch, capsys, filled.database_url, "bad\udcff")
    assert code == 3 and "no conversation" in err
    hostile = filled.sessions["hostile"][0]
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, hostile)
    assert code == 0 and "<script>" in out  # text, quoted: a terminal does not run HTML


async def _get(app: Any, path: str, **headers: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inspector") as client:
        return await client.get(path, headers=headers)


async def test_pages_escape_customer_text_and_send_a_strict_policy(filled: Filled) -> None:
    reader = Reader(filled.database_url)
    try:
        app = build_app(reader, agent=build_agent(provider=RuleProvider()))
        hostile = filled.sessions["hostile"][0]
        page = await _get(app, f"/conversations/{hostile}")
        listing = await _get(app, "/?limit=500")
        flows = await _get(app, "/flows")
        bad = await _get(app, "/?after=not-a-cursor")
        outcome = await _get(app, "/?outcome=nonsense")
        missing = await _get(app, f"/conversations/{filled.prefix}nobody")
        lost = await _get(app, f"/conversations/{filled.sessions['lost'][0]}")
    finally:
        await reader.close()
    assert page.status_code == 200 and listing.status_code == 200 and flows.status_code == 200
    for body in (page.text, listing.text):
        assert "<script" not in body and "<img src=x" not in body
        assert "&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;" in body
    assert "script-src" not in page.headers["content-security-policy"]  # default-src 'none'
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert 'data-step="welcome/hello"' in page.text and "step visited" in page.text
    assert bad.status_code == 400 and outcome.status_code == 400 and missing.status_code == 404
    assert lost.status_code == 200 and "provider-fatal" in lost.text
    assert HOSTILE not in page.text


async def test_with_a_token_every_page_asks_for_it(filled: Filled) -> None:
    token = "t" * 24
    reader = Reader(filled.database_url)
    try:
        app = build_app(reader, token=token)
        refused = await _get(app, "/")
        wrong = await _get(app, "/", authorization="Bearer " + "x" * 24)
        allowed = await _get(app, "/", authorization=f"Bearer {token}")
        cases = [await _get(app, "/", authorization=f"{scheme} {token}")
                 for scheme in ("bearer", "BEARER")]
        other_scheme = await _get(app, "/", authorization=f"Basic {token}")
        login = await _get(app, f"/login?token={token}")
        bad_login = await _get(app, "/login?token=nope")
        with_cookie = await _get(app, "/", cookie=f"turnflow_ui_token={token}")
        probe = await _get(app, "/healthz")
    finally:
        await reader.close()
    assert refused.status_code == 401 and wrong.status_code == 401
    assert allowed.status_code == 200 and with_cookie.status_code == 200
    assert [c.status_code for c in cases] == [200, 200]  # the scheme's case does not matter
    assert other_scheme.status_code == 401
    assert login.status_code == 303 and "httponly" in login.headers["set-cookie"].lower()
    assert bad_login.status_code == 401
    assert probe.status_code == 200 and probe.text == "ok\n"  # the probe needs no token


def test_cursors_round_trip_and_refuse_anything_else() -> None:
    cursor = Cursor(datetime(2026, 12, 3, 8, 0, tzinfo=UTC), "a/b?c")
    assert Cursor.decode(cursor.encode()) == cursor
    for bad in ("", "x", "WyJ4Il0", "bm90IGpzb24"):
        with pytest.raises(ValueError):
            Cursor.decode(bad)


_QUERY = st.dictionaries(
    st.sampled_from(["outcome", "flow", "agent", "since", "until", "limit", "after", "turns",
                     "from", "token", "format", "q"]),
    st.one_of(st.text(max_size=40), st.sampled_from(
        ["handoff", "2h", "0", "501", "-1", "1e3", "\x00", "a\x00b", "999999d", "9999-12-31",
         "json", "100000000000000000", "%_\\", "²"])),
    max_size=5,
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=_QUERY, session=st.one_of(st.text(max_size=30), st.sampled_from(["\x00", "a/b"])))
def test_any_query_or_session_id_is_a_page_or_a_refusal(
    filled: Filled, query: dict[str, str], session: str
) -> None:
    """Whatever a URL holds, the inspector answers a page, a 400 naming what is wrong, or a
    404, never a server error."""

    async def run() -> list[int]:
        reader = Reader(filled.database_url, pool_size=1)
        try:
            app = build_app(reader)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://i") as client:
                listing = await client.get("/", params=query)
                page = await client.get(
                    "/conversations/" + quote(session, safe=""), params=query)
                # the search box, the dead letters' cursor: whatever they hold
                searched = await client.get("/search", params={"q": session, **query})
                letters = await client.get("/dead-letters", params={"before": session})
            return [listing.status_code, page.status_code, searched.status_code,
                    letters.status_code]
        finally:
            await reader.close()

    listing, page, searched, letters = asyncio.run(run())
    assert listing in (200, 400) and page in (200, 400, 404)
    assert searched in (200, 400) and letters in (200, 400)


async def test_a_refused_record_keeps_its_words_under_its_session(filled: Filled) -> None:
    """A record refused for a bad ``at`` is dead-lettered under the session it names, with its
    words, input id, key and reason; the dead-letter list and the pages show them, and a
    record that names no session is listed with its text under no conversation."""
    sid = f"{filled.prefix}bad-at"
    reader = Reader(filled.database_url)
    try:
        rows = await reader.conversation(sid)
        letters: list[dict[str, Any]] = []
        before = None
        while True:
            page, before = await reader.dead_letters(limit=20, before=before)
            letters.extend(page)
            if before is None:
                break
        listed, _ = await reader.conversations(ListFilter(outcome="dead-lettered"), limit=500)
    finally:
        await reader.close()
    assert rows is not None
    [dead] = view.conversation_view(rows).dead_lettered
    assert dead["session_id"] == sid and dead["reason"] == "invalid-field"
    assert dead["message"] == BAD_AT["message"] and dead["input_id"] == "m-bad-at"
    assert dead["key"] == sid and "at must be" in (dead["detail"] or "")
    topic, partition, offset = dead["source"].rsplit(":", 2)
    assert topic.startswith("inbound") and int(partition) >= 0 and int(offset) >= 0
    mine = {d["session_id"]: view.dead_letter(d) for d in letters
            if d["session_id"] == sid or (d["record_key"] or "") == f"{filled.prefix}broken"}
    assert mine[sid]["message"] == BAD_AT["message"]
    assert mine[""]["reason"] == "not-utf8" and mine[""]["message"].endswith("not json")
    row = next(r for r in listed if r.session_id == sid)
    assert row.dead_reason == "invalid-field" and row.dead_message == BAD_AT["message"]

    web_reader = Reader(filled.database_url)
    try:
        app = build_app(web_reader)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            page_html = (await client.get("/dead-letters")).text
            conversation_html = (await client.get(f"/conversations/{quote(sid)}")).text
    finally:
        await web_reader.close()
    assert f'href="/conversations/{quote(sid, safe="")}"' in page_html
    assert "+351 912 345 678" in page_html and "invalid-field" in page_html
    assert "+351 912 345 678" in conversation_html and "m-bad-at" in conversation_html


async def test_search_finds_words_field_values_ids_keys_and_offsets(filled: Filled) -> None:
    """One search finds a conversation by the customer's words, a field value it holds, an
    input id, a message key, a source offset, and a dead-lettered record by its words; a
    search too short for a trigram is refused with a reason."""
    from consumer.inspect.search_view import search_hits

    booked = filled.sessions["booked"][0]
    reader = Reader(filled.database_url)
    try:
        rows = await reader.conversation(booked)
        assert rows is not None
        turn = rows.turns[1]  # "my name is Sam"
        source = f"{turn['source_topic']}:{turn['source_partition']}:{turn['source_offset']}"
        key = next(m["key"] for t in rows.turns for m in t["messages"] or [] if m.get("key"))
        bad_at = await reader.conversation(f"{filled.prefix}bad-at")
        assert bad_at is not None
        dead_source = view.conversation_view(bad_at).dead_lettered[0]["source"]
        found = {
            "phone": search_hits(await reader.search("912 345 678", limit=500)),
            "words": search_hits(await reader.search("NAME IS SAM", limit=500)),
            "offset": search_hits(await reader.search(source, limit=500)),
            "key": search_hits(await reader.search(key, limit=500)),
            "id": search_hits(await reader.search("m-bad-at", limit=500)),
            "field": search_hits(await reader.search('"name": "Sam"', limit=500)),
            "dead key": search_hits(await reader.search(f"{filled.prefix}broken", limit=500)),
            "dead source": search_hits(await reader.search(dead_source, limit=500)),
        }
        with pytest.raises(ValueError, match="at least 3"):
            await reader.search("ab")
    finally:
        await reader.close()
    assert [(h.session_id, h.where) for h in found["phone"]] == [
        (f"{filled.prefix}bad-at", "dead letter")]
    words = {(h.session_id, h.version, h.where) for h in found["words"]
             if h.session_id.startswith(filled.prefix)}
    assert {(sid, 2, "customer") for sid in filled.sessions["booked"]} <= words
    assert not any(h.where == "data" for h in found["words"])  # the data holds "Sam" alone
    assert [(h.session_id, h.version, h.where) for h in found["offset"]] == [
        (booked, 2, "source record")]
    assert any(h.session_id == booked and h.where == "message key" for h in found["key"])
    assert [h.where for h in found["id"]] == ["dead letter"]
    # a refused record by its key (it names no conversation) and by its inbound source
    assert [(h.session_id, h.where) for h in found["dead key"]] == [("", "dead letter")]
    # (a turn whose offset starts with the same digits may match too: contains, not equals)
    assert [h.session_id for h in found["dead source"] if h.where == "dead letter"] == [
        f"{filled.prefix}bad-at"]
    assert {h.session_id for h in found["field"] if h.where == "data"} >= set(
        filled.sessions["booked"])


async def test_each_search_reads_its_trigram_index(filled: Filled) -> None:
    """The search's expressions are exactly those the migration indexed: with sequential
    scans off, each search statement's plan reads its own index (the turn log's, in each of
    its monthly partitions)."""
    from store.search_text import INDEXES

    engine = create_async_engine(async_url(filled.database_url))
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SET enable_seqscan = off"))
            for name, (table, expression, _) in INDEXES.items():
                match = "@@ plainto_tsquery('simple', :q)" if table == "turns" else "ILIKE :p"
                plan = (await connection.execute(text(
                    f"EXPLAIN SELECT 1 FROM {table} WHERE {expression} {match}"
                ), {"p": "%Sam and more%", "q": "Sam and more"})).scalars().all()
                if table == "turns":  # partitioned by month: each month's copy of the index
                    assert any("Bitmap Index Scan" in line for line in plan), plan
                    assert not any("Seq Scan" in line for line in plan), plan
                else:
                    assert any(name in line for line in plan), (name, plan)
    finally:
        await engine.dispose()


def test_the_cli_searches_and_lists_dead_letters(
    filled: Filled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``inspect --search`` prints where the text was found in which conversation and turn,
    ``--dead-letters`` the refused records with their words; a short search exits 2."""
    sid = f"{filled.prefix}bad-at"
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, "--search", "912 345 678")
    assert code == 0 and sid in out and "dead letter:" in out and "912 345 678" in out
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, "--search", "my name is Sam",
                        "--json", "--limit", "500")
    hits = json.loads(out)["hits"]
    assert {(h["session_id"], h["version"]) for h in hits} >= {
        (s, 2) for s in filled.sessions["booked"]}
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, "--dead-letters",
                        "--limit", "500")
    line = next(x for x in out.splitlines() if x.startswith(sid))
    assert code == 0 and "invalid-field" in line and "+351 912 345 678" in line
    assert "m-bad-at" in line
    code, _, err = _cli(monkeypatch, capsys, filled.database_url, "--search", "ab")
    assert code == 2 and "at least 3" in err


async def test_a_long_conversation_pages_to_its_start_and_back(filled: Filled) -> None:
    """A conversation of 2,000 turns is read a page at a time from its latest turns to its
    first by the page's own "earlier turns" links, and back by "later turns": every turn
    once, no page refused, whatever the turn number."""

    import asyncpg

    from store.urls import plain_url

    sid = f"long-{filled.prefix}"  # not under the prefix: the list tests count those
    connection = await asyncpg.connect(plain_url(filled.database_url))
    try:
        await connection.execute(
            "INSERT INTO sessions (id, version, state) VALUES ($1, 2000, '{}'::jsonb) "
            "ON CONFLICT (id) DO NOTHING", sid)
        await connection.execute(
            "INSERT INTO turns (session_id, version, input, messages, outcomes, llm_calls,"
            " input_id, created_at) SELECT $1, v,"
            " jsonb_build_object('session_id', $1::text, 'message', 'message ' || v),"
            " '[]'::jsonb, '[]'::jsonb, 0, 'l' || v,"
            " now() - ((2000 - v) || ' ms')::interval FROM generate_series(1, 2000) AS v"
            " ON CONFLICT DO NOTHING", sid)
    finally:
        await connection.close()
    reader = Reader(filled.database_url)
    try:
        await _page_through(build_app(reader), sid)
    finally:
        await reader.close()


async def _page_through(app: Any, sid: str) -> None:
    import re

    seen: list[int] = []
    url: str | None = f"/conversations/{quote(sid)}"
    pages = 0
    while url is not None:
        response = await _get(app, url)
        assert response.status_code == 200, (url, response.text[:200])
        shown = [int(n) for n in
                 re.findall(r'<article class="turn[^"]*" id="t(\d+)"', response.text)]
        seen = shown + seen
        earlier = re.search(r'<a href="([^"]+)">← earlier turns', response.text)
        url = earlier.group(1).replace("&amp;", "&") if earlier else None
        pages += 1
    assert seen == list(range(1, 2001)) and pages == 40
    forward: list[int] = []
    url = f"/conversations/{quote(sid)}?from=1"
    while url is not None:
        response = await _get(app, url)
        assert response.status_code == 200
        forward += [int(n) for n in
                    re.findall(r'<article class="turn[^"]*" id="t(\d+)"', response.text)]
        later = re.search(r'<a href="([^"]+)">later turns', response.text)
        url = later.group(1).replace("&amp;", "&") if later else None
    assert forward == list(range(1, 2001))
    assert (await _get(app, f"/conversations/{quote(sid)}?from=1999&turns=50")).status_code == 200
    assert (await _get(app, f"/conversations/{quote(sid)}?from=0")).status_code == 400


def test_the_page_exports_the_json_of_inspect_and_the_replay_command(
    filled: Filled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's JSON link serves the document ``turnflow inspect SESSION --json`` prints for
    the same turns, and each turn shows the ``turnflow replay`` command for its conversation,
    the session id quoted for a shell."""
    import html
    import shlex

    sid = filled.sessions["wrong-day"][0]
    hostile = filled.sessions["hostile"][0]

    async def pages() -> tuple[str, httpx.Response, str]:
        reader = Reader(filled.database_url)
        try:
            app = build_app(reader, agent_spec="tests.inspect.filling:agent")
            page_html = (await _get(app, f"/conversations/{quote(sid)}?turns=3")).text
            link = re.search(r'<a class="export" href="([^"]+)"', page_html)
            assert link is not None
            exported = await _get(app, html.unescape(link.group(1)))
            hostile_html = (await _get(app, f"/conversations/{quote(hostile)}")).text
        finally:
            await reader.close()
        return page_html, exported, hostile_html

    page_html, exported, hostile_html = asyncio.run(pages())
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/json")
    code, out, _ = _cli(monkeypatch, capsys, filled.database_url, sid, "--json", "--turns", "3")
    assert code == 0 and exported.json() == json.loads(out)
    assert [t["version"] for t in exported.json()["turns"]] == [2, 3, 4]
    commands = {html.unescape(v) for v in re.findall(r'class="replay" readonly size="70" '
                                                      r'value="([^"]+)"', page_html)}
    assert commands == {f"turnflow replay --agent tests.inspect.filling:agent --session {sid}"}
    assert shlex.split(next(iter(commands)))[-1] == sid
    assert "<script>" not in hostile_html.split("<main>")[1]


def test_graph_of_an_unknown_session_fails_and_another_agents_conversation_warns(
    filled: Filled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    """``turnflow graph --session`` with a session id that names nothing exits 3 with a
    message; with a conversation another agent answered (flows the drawn agent lacks) it warns
    on stderr, and the conversation page says so above its diagram."""
    monkeypatch.delenv("INSPECT_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", filled.database_url)
    code = cli.main(["graph", "--agent", "tests.inspect.filling:agent", "--session",
                     filled.prefix + "typo", "-o", str(tmp_path / "x.svg")])
    err = capsys.readouterr().err
    assert code == 3 and "no conversation" in err and not (tmp_path / "x.svg").exists()
    booked = filled.sessions["booked"][0]
    code = cli.main(["graph", "--agent", "examples.agente_pt:agente", "--session", booked,
                     "-o", str(tmp_path / "pt.svg")])
    err = capsys.readouterr().err
    assert code == 0 and "warning" in err and "booking" in err
    code = cli.main(["graph", "--agent", "tests.inspect.filling:agent", "--session", booked,
                     "-o", str(tmp_path / "own.svg")])
    assert code == 0 and "warning" not in capsys.readouterr().err

    async def pages() -> tuple[str, str]:
        from consumer.agents import load_agent

        reader = Reader(filled.database_url)
        try:
            other = build_app(reader, agent=load_agent("examples.agente_pt:agente"))
            own = build_app(reader, agent=load_agent("tests.inspect.filling:agent"))
            path = f"/conversations/{quote(booked)}"
            return (await _get(other, path)).text, (await _get(own, path)).text
        finally:
            await reader.close()

    other_html, own_html = asyncio.run(pages())
    assert 'class="warning"' in other_html and 'class="warning"' not in own_html
