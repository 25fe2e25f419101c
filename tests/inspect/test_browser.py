"""The inspector as a person uses it, in a real headless Chromium driven by Playwright.

A live ``turnflow ui`` (the command, in its own process) serves a database the real consumer
filled with many conversations (``tests.inspect.filling``). The tests open the list, filter it
by hand-off, open a conversation, expand a turn into its decision trace, see the path on the
flow diagram, check that a customer message holding HTML and script stays text, and that the
list, its filter and the timeline work with JavaScript off. ``turnflow ui --console`` is driven
the same way: a message typed into the test console's form is answered by the consumer it runs.

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, ``make chromium`` installs it);
Playwright never downloads one. Without it the tests skip, or fail under
``TURNFLOW_REQUIRE_SERVERS=1`` (CI). Screenshots go to ``test-artifacts/browser/`` (or
``$TURNFLOW_TEST_ARTIFACTS/browser``), kept after the run for a person to look at.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.servers import servers_unavailable
from tests.inspect.conftest import Filled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CHROMIUM = os.environ.get("TURNFLOW_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("TURNFLOW_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "browser"
VISITED_FILL = "rgb(253, 230, 138)"  # diagram.SVG_STYLE's fill of a visited step


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        servers_unavailable(f"no Chromium at {CHROMIUM} (make chromium installs Debian's)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        servers_unavailable("playwright is not installed (pip install -e '.[test]')")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def ui(filled: Filled) -> Iterator[str]:
    """``turnflow ui`` on a free loopback port over the filled database; its base URL."""
    env = {**os.environ, "DATABASE_URL": filled.database_url, "LOG_LEVEL": "INFO"}
    env.pop("INSPECT_DATABASE_URL", None)
    env.pop("TURNFLOW_UI_TOKEN", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "consumer.cli", "ui", "--port", "0",
         "--agent", "tests.inspect.filling:agent"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", first)
        assert match, f"turnflow ui did not start: {first!r}"
        yield f"http://127.0.0.1:{match.group(1)}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        logs = process.stderr.read() if process.stderr else ""
        if process.stderr:
            process.stderr.close()
    # The request log names routes, never a session id or anything a customer wrote.
    assert "ui list 200" in logs
    assert filled.prefix not in logs and "pwned" not in logs and "saturday" not in logs


def _shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)


def test_filter_by_handoff_open_a_conversation_expand_a_turn_and_see_the_path(
    browser: Any, ui: str, filled: Filled
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{ui}/?limit=100")
        listed = page.locator("a.session").all_inner_texts()
        assert filled.all() <= set(listed)
        _shot(page, "01-list")

        page.select_option("select[name=outcome]", "handoff")
        page.click("form.filters button[type=submit]")
        page.wait_for_url(re.compile(r"outcome=handoff"))
        rows = page.locator("table.conversations tbody tr")
        mine = [r for r in rows.all() if r.locator("a.session").inner_text().startswith(
            filled.prefix)]
        assert sorted(r.locator("a.session").inner_text() for r in mine) == sorted(
            filled.sessions["handoff"])
        assert all(r.locator(".badge.flag.handoff").count() == 1 for r in rows.all())
        _shot(page, "02-handoffs")

        target = filled.sessions["handoff"][0]
        page.click(f"a.session:text-is('{target}')")
        page.wait_for_selector("h1.session")
        assert page.locator("h1.session").inner_text() == target
        handed = page.locator("article.turn#t2")
        assert handed.locator(".bubble.assistant.handoff").count() == 1
        trace = handed.locator("details.trace")
        assert not trace.locator("ol.stages").is_visible()
        trace.locator("summary").click()
        decided = trace.locator("li.stage.decided")
        assert decided.is_visible()
        assert "keyword" in decided.inner_text() and "handoff" in decided.inner_text()
        trace.scroll_into_view_if_needed()
        _shot(page, "03-handoff-turn-expanded")

        step = page.locator('svg.flows g.step[data-step="welcome/ask_name"]')
        assert "visited" in (step.get_attribute("class") or "")
        fill = step.locator("rect").evaluate("r => getComputedStyle(r).fill")
        assert fill == VISITED_FILL
        unvisited = page.locator('svg.flows g.step[data-step="booking/book"] rect')
        assert unvisited.evaluate("r => getComputedStyle(r).fill") != VISITED_FILL
    finally:
        context.close()


def test_a_booking_shows_its_path_and_the_corrected_day(
    browser: Any, ui: str, filled: Filled
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{ui}/conversations/{filled.sessions['wrong-day'][0]}")
        third = page.locator("article.turn#t3")
        third.locator("details.trace summary").click()
        assert "corrected" in third.locator("li.stage.decided").inner_text()
        assert "saturday" in third.locator("li.stage.understood").inner_text()
        taken = page.locator("svg.flows path.edge.taken")
        assert taken.count() >= 3
        for name in ("booking/what", "booking/book"):
            cls = page.locator(f'svg.flows g.step[data-step="{name}"]').get_attribute("class")
            assert "visited" in (cls or "")
        third.scroll_into_view_if_needed()
        _shot(page, "04-corrected-day")
    finally:
        context.close()


def test_a_message_holding_html_and_script_is_shown_as_text(
    browser: Any, ui: str, filled: Filled
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        hostile = filled.sessions["hostile"][0]
        page.goto(f"{ui}/conversations/{hostile}")
        bubble = page.locator("article.turn#t1 .bubble.customer .text")
        assert bubble.inner_text().startswith("<script>document.title=")
        assert page.title() == f"{hostile} · turnflow inspector"
        assert page.locator("main script, main img").count() == 0 and dialogs == []
        page.goto(f"{ui}/?limit=100")
        assert page.title() == "conversations · turnflow inspector"
        _shot(page, "05-hostile-text")
    finally:
        context.close()


def test_the_list_its_filter_and_the_timeline_work_without_javascript(
    browser: Any, ui: str, filled: Filled
) -> None:
    context = browser.new_context(java_script_enabled=False,
                                  viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(ui)
        page.select_option("select[name=outcome]", "dead-lettered")
        page.click("form.filters button[type=submit]")
        page.wait_for_url(re.compile(r"outcome=dead-lettered"))
        listed = set(page.locator("a.session").all_inner_texts())
        assert set(filled.sessions["refused"]) <= listed
        assert not listed & set(filled.sessions["booked"])
        page.click(f"a.session:text-is('{filled.sessions['refused'][0]}')")
        page.wait_for_selector("section.pending p.dead")
        assert "provider-fatal" in page.locator("section.pending").inner_text()
        first = page.locator("article.turn#t1 details.trace")
        first.locator("summary").click()
        assert first.locator("li.stage.sent").is_visible()
        _shot(page, "06-no-javascript")
    finally:
        context.close()


def test_the_diagram_file_matches_the_page(tmp_path: Path) -> None:
    """``turnflow graph`` writes the drawing the page shows (a copy kept with the shots)."""
    from consumer import cli

    out = tmp_path / "flows.svg"
    assert cli.main(["graph", "--agent", "tests.inspect.filling:agent", "-o", str(out)]) == 0
    if ARTIFACTS.is_dir():
        shutil.copy(out, ARTIFACTS / "flows.svg")
    assert 'data-step="booking/what"' in out.read_text()


@pytest.fixture(scope="module")
def console_ui(filled: Filled, kafka_bootstrap: str, kafka_is_embedded: bool) -> Iterator[str]:
    """``turnflow ui --console`` on a free loopback port: the consumer it runs answers the
    console's messages into the filled database; its base URL."""
    env = {**os.environ, "DATABASE_URL": filled.database_url, "LOG_LEVEL": "INFO",
           "AGENT": "tests.inspect.filling:agent", "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "METRICS_PORT": "0"}
    if kafka_is_embedded:  # no producer ids there; an empty fetch is answered at its wait's end
        env.update(KAFKA_IDEMPOTENT_PRODUCER="false", KAFKA_FETCH_MAX_WAIT_MS="10")
    for name in ("INSPECT_DATABASE_URL", "TURNFLOW_UI_TOKEN", "TURNFLOW_UI_TOKEN_FILE"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "consumer.cli", "ui", "--port", "0", "--console"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        lines = []
        for _ in range(50):  # the consumer's own log lines come before the server's
            line = process.stderr.readline()
            lines.append(line)
            if not line or "turnflow ui:" in line:
                break
        match = re.search(r"turnflow ui: http://127\.0\.0\.1:(\d+)/ \(test console", lines[-1])
        assert match, f"turnflow ui --console did not start: {''.join(lines)[-2000:]!r}"
        yield f"http://127.0.0.1:{match.group(1)}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        if process.stderr:
            process.stderr.read()
            process.stderr.close()


def test_the_console_chats_and_shows_each_replys_trace_without_javascript(
    browser: Any, console_ui: str
) -> None:
    """A person types into the console's form (no JavaScript): the message, the agent's reply,
    its outcome lines and links are on the page, under a console session of its own, and the
    inspector lists the conversation like any other."""
    context = browser.new_context(viewport={"width": 1200, "height": 900},
                                  java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(f"{console_ui}/console")
        session = page.locator("code.session").inner_text()
        assert re.fullmatch(r"console-[0-9a-f]{12}", session)
        page.fill("input[name=text]", "hello <b>there</b>")
        page.click("form.console button[type=submit]")
        page.wait_for_selector("article.exchange .bubble.assistant", timeout=120_000)
        exchange = page.locator("article.exchange").first
        assert exchange.locator(".bubble.customer .text").inner_text() == "hello <b>there</b>"
        assert exchange.locator(".bubble.assistant .text").first.inner_text().strip()
        # the summary counts the table below it instead of repeating its lines
        summary = re.fullmatch(r"why: (\d+) decisions?, \d+ model calls?",
                               exchange.locator("details.trace summary").inner_text())
        assert summary is not None
        rows = exchange.locator("table.lines tr").count()
        assert rows >= 2 and rows - 1 == int(summary.group(1))  # a header, then each line
        _shot(page, "09-console")
        page.click(f"a[href='/conversations/{session}']")
        page.wait_for_selector("h1.session")
        assert page.locator("h1.session").inner_text() == session
    finally:
        context.close()


def test_from_a_phone_number_to_the_turn_that_asked_the_name_twice(
    browser: Any, ui: str, filled: Filled
) -> None:
    """An operator with only the customer's phone number types it into the search box, opens
    the hit, and sees the turn where the agent asked the customer's name a second time."""
    from tests.inspect.filling import PHONE

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(ui)
        page.fill("form.search input[name=q]", PHONE)
        page.click("form.search button[type=submit]")
        page.wait_for_url(re.compile(r"/search\?q="))
        hits = page.locator("table.search-hits tr.hit")
        mine = [h for h in hits.all() if h.locator("a.session").inner_text().startswith(
            filled.prefix)]
        assert sorted(h.locator("a.session").inner_text() for h in mine) == sorted(
            f"{sid} · turn #2" for sid in filled.sessions["phone"])
        assert all("customer" in h.inner_text() and PHONE in h.inner_text() for h in mine)
        _shot(page, "07-search-phone")
        target = filled.sessions["phone"][0]
        page.click(f"a.session:text-is('{target} · turn #2')")
        page.wait_for_selector("article.turn#t2")
        asked = page.locator("article.turn#t2 .bubble.assistant .text")
        assert asked.all_inner_texts() == ["Could you tell me your first name?"]
        page.goto(f"{ui}/conversations/{target}")
        first = page.locator("article.turn#t1 .bubble.assistant .text").all_inner_texts()
        assert "Could you tell me your first name?" in first  # asked once already
        second = page.locator("article.turn#t2")
        second.locator("details.trace summary").click()
        assert "ask_name" in second.locator("li.stage.decided").inner_text()
        second.scroll_into_view_if_needed()
        _shot(page, "08-asked-the-name-twice")
    finally:
        context.close()


def test_from_i_never_got_an_answer_to_the_dead_lettered_record(
    browser: Any, ui: str, filled: Filled
) -> None:
    """"I never got an answer": the customer's own words find the record a broken adapter
    sent (a bad ``at``); it is shown with its words and reason, under its conversation, and in
    the dead letters list with a link to that conversation."""
    from tests.inspect.filling import BAD_AT

    sid = f"{filled.prefix}bad-at"
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(ui)
        page.fill("form.search input[name=q]", "I never got an answer")
        page.click("form.search button[type=submit]")
        hit = page.locator("table.search-hits tr.hit", has_text=sid)
        assert hit.count() == 1 and "dead letter" in hit.inner_text()
        _shot(page, "09-search-never-answered")
        hit.locator("a.session").click()
        page.wait_for_selector("section.pending p.dead")
        dead = page.locator("section.pending p.dead").inner_text()
        assert BAD_AT["message"] in dead and "invalid-field" in dead and "m-bad-at" in dead
        assert "at must be" in dead and "inbound record" in dead
        _shot(page, "10-dead-letter-in-its-conversation")
        page.click("header nav a:text-is('dead letters')")
        row = page.locator("table.dead-letters tbody tr", has_text=BAD_AT["message"])
        assert row.count() == 1 and "invalid-field" in row.inner_text()
        assert row.locator("a.session").get_attribute("href") == f"/conversations/{sid}"
        broken = page.locator("table.dead-letters tbody tr", has_text=f"{filled.prefix}broken")
        assert broken.count() == 1 and "names none" in broken.inner_text()
        assert "not-utf8" in broken.inner_text()
        _shot(page, "11-dead-letters")
    finally:
        context.close()


# Twelve pages of fifty turns: the paging's every step (first, middle, last page) in a
# conversation built by the real consumer, one turn at a time.
LONG_TURNS = 600


@pytest.fixture(scope="module")
def long_session(filled: Filled, kafka_bootstrap: str, kafka_is_embedded: bool) -> str:
    """A conversation of ``LONG_TURNS`` turns, each a message the real consumer answered."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from tests.fixtures.broker import TopicFactory
    from tests.inspect.filling import long_conversation
    from tests.integration.harness import ServiceSetup, service_topics

    sid = f"long-{filled.prefix}{LONG_TURNS}"  # not under the prefix: the list tests count those

    async def run() -> None:
        topics = await service_topics(TopicFactory(kafka_bootstrap, "inspect-long"))
        setup = ServiceSetup(kafka_bootstrap, filled.database_url, topics, kafka_is_embedded)
        await long_conversation(setup, sid, LONG_TURNS)

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()
    return sid


def test_a_long_conversation_pages_to_its_start(
    browser: Any, ui: str, long_session: str
) -> None:
    """From its latest page, the "earlier turns" link walks a conversation of ``LONG_TURNS``
    turns back to its first turn, 50 turns a page, every page served. (The reading side's own
    tests page through 2,000 turns; ``make bench-inspect`` times far longer ones.)"""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{ui}/conversations/{long_session}")
        seen: list[int] = []
        pages = 0
        while True:
            ids = page.locator("article.turn").evaluate_all("els => els.map(e => e.id)")
            seen = [int(i[1:]) for i in ids] + seen
            pages += 1
            earlier = page.locator("a", has_text="earlier turns")
            if earlier.count() == 0:
                break
            if pages == LONG_TURNS // 100:
                _shot(page, "12-long-conversation-midway")
            earlier.first.click()
            page.wait_for_load_state()
        assert seen == list(range(1, LONG_TURNS + 1)) and pages == LONG_TURNS // 50
        assert page.locator("article.turn#t1 .bubble.customer .text").inner_text() == "message 1"
        _shot(page, "13-long-conversation-start")
    finally:
        context.close()


@pytest.mark.parametrize("spec", ["examples.demo_agent:agent", "examples.loja_verde:agente"])
def test_the_diagram_is_readable_for_the_demo_and_loja_verde_agents(
    browser: Any, spec: str
) -> None:
    """Every label of the drawing lies inside it (nothing clipped at the right or bottom),
    conditions are written out (no bare "if …"), and the labels of a step's moves to the end
    do not overlap."""
    from consumer.agents import load_agent
    from consumer.inspect import diagram

    graph = diagram.flow_graph(load_agent(spec))
    drawing = diagram.svg(graph)
    assert "if …" not in drawing
    if not graph.flows:  # loja_verde: its idle reply answers everything
        assert "has no flows" in drawing
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    try:
        page.set_content(f"<!doctype html><body style='margin:0'>{drawing}</body>")
        size = page.locator("svg.flows").bounding_box()
        boxes = page.locator("svg.flows text").evaluate_all(
            "els => els.map(e => { const b = e.getBBox();"
            " return [b.x, b.y, b.width, b.height, e.textContent]; })")
        for x, y, w, h, label in boxes:
            assert x >= 0 and y >= 0, label
            assert x + w <= size["width"] + 0.5 and y + h <= size["height"] + 0.5, label
        ends = [b for b in boxes if b[4].endswith(": end")]
        for i, a in enumerate(ends):
            for b in ends[i + 1:]:
                apart = (a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0]
                         or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1])
                assert apart, (a, b)
        _shot(page, "14-diagram-" + spec.split(".")[1].split(":")[0])
    finally:
        context.close()
