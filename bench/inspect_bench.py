"""Inspector benchmark: do the list and the conversation page stay as cheap as reading the
rows they show, on a large database?

A scratch database is seeded (by SQL, in bulk) with ``--conversations`` conversations of three
turns each, one in ``--handoff-every`` handed to a person on its second turn, plus one
conversation of ``--long-turns`` turns. Each measured view is then timed back to back beside
a plain ``SELECT`` of exactly the rows it shows (by primary key or by its range), and printed
as wall ms (median and p95) and as the ratio of the two:

- the conversation list, first page and a page deep in (keyset, ``ix_sessions_updated``);
- the list filtered by hand-off (``ix_turns_handoff``) and by flow;
- the long conversation's page (its last 50 turns) through the whole web page: the queries,
  the view model, the HTML with the flow diagram and the path, as ``turnflow ui`` serves it
  (the ASGI app, without the socket);
- the same conversation in the terminal view (``turnflow inspect``'s text).

- the search (``turnflow inspect --search``, ``Reader.search``) for a phone number one
  conversation holds, a source offset and words every turn holds, beside a plain indexed read
  of the conversation found (migration 0015's trigram indexes).

Then the same searches without the trigram indexes, and the same list queries with migration
0014's turn and session indexes dropped, to show what they buy.

    python -m bench.inspect_bench [--conversations 100000] [--long-turns 10000] [--calls 30]
    make bench-inspect

Uses DATABASE_URL (a scratch database is created there and dropped), else an embedded
PostgreSQL started for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import Any

import asyncpg
import httpx

from bench.harness.databases import execute_sql, scratch_database
from bench.harness.percentiles import percentile
from consumer.inspect import terminal, view
from consumer.inspect.reading import ListFilter, Reader
from consumer.inspect.web import build_app
from engine.providers.rules import RuleProvider
from examples.demo_agent import build_agent

LONG = "long-conversation"
PAGE = 50

# Three turns per conversation, as the demo's booking writes them: a message in, a reply out,
# outcome lines naming flow and step; every ``handoff_every``-th conversation's second turn
# hands over to a person (the turn's own "handoff" line, no run).
_SEED = """
INSERT INTO sessions (id, version, state, created_at, updated_at)
SELECT 'c' || g, 3,
       jsonb_build_object('id', 'c' || g, 'v', 4, 'data', jsonb_build_object('day', 'friday',
         'phone', '+351 9' || lpad(g::text, 8, '0')),
         'runs', jsonb_build_array(jsonb_build_object('flow_id', 'booking', 'step_id', 'confirm',
                                                      'status', 'asking'))),
       now() - (g || ' seconds')::interval, now() - (g || ' seconds')::interval
FROM generate_series(1, {conversations}) AS g;

INSERT INTO turns (session_id, version, input, messages, outcomes, started, llm_calls,
                   source_topic, source_partition, source_offset, input_id, created_at)
SELECT 'c' || g, v,
       jsonb_build_object('session_id', 'c' || g, 'message', CASE WHEN v = 2
                            THEN 'call me on +351 9' || lpad(g::text, 8, '0')
                            ELSE 'book a repair on friday ' || v END,
                          'id', 'm' || v),
       jsonb_build_array(jsonb_build_object('kind', 'ai', 'key', 'r1@c' || g || ':what:' || v,
                         'text', 'Which day suits you?', 'step_id', 'what', 'after_ms', 0)),
       CASE WHEN v = 2 AND g % {handoff_every} = 0 THEN
         '[{{"code": "handoff", "run_id": null, "flow_id": null, "step_id": null,
             "status": null, "detail": "keyword", "llm_calls": 0}}]'::jsonb
       ELSE
         ('[{{"code": "spoke", "run_id": "r1", "flow_id": "booking", "step_id": "what",'
          || ' "status": "asking", "detail": null, "llm_calls": 1}},'
          || ' {{"code": "if", "run_id": "r1", "flow_id": "booking", "step_id": "brakes?",'
          || ' "status": "running", "detail": "else", "llm_calls": 0}}]')::jsonb
       END,
       CASE WHEN v = 1 THEN
         jsonb_build_array(jsonb_build_object('run_id', 'r1', 'flow_id',
           CASE WHEN g % 7 = 0 THEN 'hours' ELSE 'booking' END, 'reason', 'message'))
       ELSE '[]'::jsonb END,
       2, 'inbound.turns', g % 12, g * 3 + v, 'm' || v,
       now() - (g || ' seconds')::interval - ((3 - v) || ' milliseconds')::interval
FROM generate_series(1, {conversations}) AS g, generate_series(1, 3) AS v;

INSERT INTO sessions (id, version, state) VALUES ('{long}', {long_turns},
  '{{"id": "{long}", "v": 4, "runs": []}}'::jsonb);
INSERT INTO turns (session_id, version, input, messages, outcomes, llm_calls, source_topic,
                   source_partition, source_offset, input_id, created_at)
SELECT '{long}', v, jsonb_build_object('session_id', '{long}', 'message', 'hello ' || v,
                                       'id', 'l' || v),
       jsonb_build_array(jsonb_build_object('kind', 'ai', 'key', 'r1@{long}:what:' || v,
                         'text', 'Hello again, ' || v, 'step_id', 'what', 'after_ms', 0)),
       '[{{"code": "spoke", "run_id": "r1", "flow_id": "booking", "step_id": "what",
           "status": "asking", "detail": null, "llm_calls": 1}}]'::jsonb,
       1, 'inbound.turns', 99, v, 'l' || v, now() - (({long_turns} - v) || ' ms')::interval
FROM generate_series(1, {long_turns}) AS v;
"""
# As autovacuum leaves a table that is mostly read: statistics, and the visibility map that
# lets an index answer alone.
_VACUUM = (
    "VACUUM ANALYZE sessions", "VACUUM ANALYZE turns", "VACUUM ANALYZE dead_lettered_sources"
)

_DROP_SEARCH = (
    "DROP INDEX ix_turns_words; DROP INDEX ix_sessions_search;"
    " DROP INDEX ix_dead_lettered_sources_search; ANALYZE turns; ANALYZE sessions;"
)

_DROP = (
    "DROP INDEX ix_turns_handoff; DROP INDEX ix_turns_fallback; DROP INDEX ix_turns_error;"
    " DROP INDEX ix_turns_gated; DROP INDEX ix_sessions_updated; ANALYZE turns;"
)


async def _pairs(
    measured: Callable[[], Awaitable[Any]], plain: Callable[[], Awaitable[Any]], calls: int
) -> tuple[list[float], list[float]]:
    """Wall ms of ``measured`` and of ``plain``, called in turn ``calls`` times each, so a
    change in the machine's load falls on both alike."""
    await measured()  # warm: the pool, the plan cache, the pages in shared buffers
    await plain()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(calls):
        for call, out in ((measured, times[0]), (plain, times[1])):
            started = time.perf_counter()
            await call()
            out.append((time.perf_counter() - started) * 1000)
    return times


def _row(name: str, rows: int, times: tuple[list[float], list[float]]) -> None:
    measured, plain = times
    m, p = statistics.median(measured), statistics.median(plain)
    p95 = percentile(measured, 0.95)
    print(f"{name:<38} {rows:>6} {m:>9.2f} {p95:>9.2f} {p:>9.2f} {m / p:>7.1f}x", flush=True)


async def _lists(url: str, reader: Reader, calls: int, label: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        async def plain_sessions(ids: list[str]) -> Callable[[], Awaitable[Any]]:
            async def call() -> Any:
                return await connection.fetch(
                    "SELECT id, version, state, created_at, updated_at FROM sessions "
                    "WHERE id = ANY($1::text[])", ids)
            return call

        first, after = await reader.conversations(ListFilter(), limit=PAGE)
        for _ in range(20):  # twenty pages in: a cursor deep in the list
            _, after = await reader.conversations(ListFilter(), limit=PAGE, after=after)
        deep, _ = await reader.conversations(ListFilter(), limit=PAGE, after=after)
        handoff, _ = await reader.conversations(ListFilter(outcome="handoff"), limit=PAGE)
        flow, _ = await reader.conversations(ListFilter(flow="hours"), limit=PAGE)
        cases = [
            ("list, first page" + label, ListFilter(), None, first),
            ("list, page 21" + label, ListFilter(), after, deep),
            ("list by hand-off" + label, ListFilter(outcome="handoff"), None, handoff),
            ("list by flow" + label, ListFilter(flow="hours"), None, flow),
        ]
        for name, where, cursor, rows in cases:
            def measured(where: ListFilter = where, cursor: Any = cursor) -> Awaitable[Any]:
                return reader.conversations(where, limit=PAGE, after=cursor)
            plain = await plain_sessions([r.session_id for r in rows])
            _row(name, len(rows), await _pairs(measured, plain, calls))
    finally:
        await connection.close()


async def _pages(url: str, reader: Reader, calls: int) -> None:
    connection = await asyncpg.connect(url)
    app = build_app(reader, agent=build_agent(provider=RuleProvider()))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            async def page() -> None:
                response = await client.get(f"/conversations/{LONG}")
                assert response.status_code == 200 and "#" in response.text

            async def text() -> str:
                rows = await reader.conversation(LONG, turns=PAGE)
                assert rows is not None
                return terminal.conversation_text(view.conversation_view(rows))

            async def plain_page() -> Any:
                return await connection.fetch(
                    "SELECT * FROM turns WHERE session_id = $1 AND version > $2 "
                    "ORDER BY version", LONG, LONG_TURNS[0] - PAGE)

            _row(f"conversation page ({LONG_TURNS[0]:,} turns)", PAGE,
                 await _pairs(page, plain_page, calls))
            _row("conversation, terminal text", PAGE, await _pairs(text, plain_page, calls))
    finally:
        await connection.close()


async def _searches(url: str, reader: Reader, calls: int, conversations: int,
                    label: str) -> None:
    """``turnflow inspect --search`` (the three statements of ``Reader.search``) for one
    customer's phone number (one turn and one conversation's data hold it), for an input id,
    and for words every turn holds, each beside a plain indexed lookup of the conversation the
    operator then opens (its session row and its turns, by primary key and unique key)."""
    connection = await asyncpg.connect(url)
    target = f"c{conversations // 2}"
    phone = f"+351 9{conversations // 2:08d}"
    try:
        async def plain() -> Any:
            await connection.fetch("SELECT * FROM sessions WHERE id = $1", target)
            return await connection.fetch(
                "SELECT * FROM turns WHERE session_id = $1 ORDER BY version", target)

        cases = [
            ("search, a phone number" + label, phone),
            ("search, a source offset" + label, f"inbound.turns:{(conversations // 2) % 12}:"
                                                 f"{(conversations // 2) * 3 + 2}"),
            ("search, words in every turn" + label, "Which day suits"),
        ]
        for name, query in cases:
            found = await reader.search(query, limit=PAGE)
            rows = len(found.turns) + len(found.sessions) + len(found.dead_letters)

            def measured(query: str = query) -> Awaitable[Any]:
                return reader.search(query, limit=PAGE)
            _row(name, rows, await _pairs(measured, plain, calls))
    finally:
        await connection.close()


LONG_TURNS = [10_000]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--long-turns", type=int, default=10_000)
    parser.add_argument("--handoff-every", type=int, default=100)
    parser.add_argument("--calls", type=int, default=30)
    options = parser.parse_args()
    LONG_TURNS[0] = options.long_turns
    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-inspect")
        started = time.perf_counter()
        asyncio.run(execute_sql(database.url, _SEED.format(
            conversations=options.conversations, handoff_every=options.handoff_every,
            long=LONG, long_turns=options.long_turns)))
        for statement in _VACUUM:
            asyncio.run(execute_sql(database.url, statement))
        print(f"seeded {options.conversations:,} conversations "
              f"({3 * options.conversations + options.long_turns:,} turns) in "
              f"{time.perf_counter() - started:.0f} s on {database.where}", flush=True)
        print(f"{'view':<38} {'rows':>6} {'p50 ms':>9} {'p95 ms':>9} {'plain ms':>9} "
              f"{'ratio':>8}", flush=True)

        async def run() -> None:
            reader = Reader(database.url)
            try:
                await _pages(database.url, reader, options.calls)
                await _lists(database.url, reader, options.calls, "")
                await _searches(database.url, reader, options.calls, options.conversations, "")
                await execute_sql(database.url, _DROP_SEARCH)
                await _searches(database.url, reader, max(3, options.calls // 10),
                                options.conversations, " (no index)")
                await execute_sql(database.url, _DROP)
                await _lists(database.url, reader, max(5, options.calls // 5),
                             " (no index)")
            finally:
                await reader.close()

        asyncio.run(run())


if __name__ == "__main__":
    main()
