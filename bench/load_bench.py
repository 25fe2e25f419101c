"""Load benchmark: does a turn's load, or a timer's write, cost more as the tables grow?

Every turn starts with one load statement (``Store.load_many``, ``store/history.py``): the
session, its last history entries, whether the turn's source records are already in the turn
log (a replay) and whether the conversation already had its input id (a duplicate). The turn
log only grows, so that statement must cost the same for the 10th turn of a conversation and
for the 10,000th, and the same beside 10,000 logged turns and beside 200,000.

For each shape, a scratch database is seeded (by SQL, in bulk) with one conversation of
``--session-turns`` logged turns among other conversations' turns up to ``--table-turns`` in
all, then analysed as autovacuum would. One client then loads that conversation back to back
with a new source record and input id each time (the consumer's every turn), and saves a turn
of another conversation the same way: both wall times per call, median and p95, and the load
as a multiple of the save, measured side by side.

Then turns that add nothing to the history: a 100-turn conversation followed by
``--silent-turns`` wakes that sent nothing, the history read's worst case (it must reach back
past all of them for its entries); the same load and save timings.

Then where the history's entries come from: each turn's save stores the entries it gives
(``turns.history``) and a load reads them as they are; rows saved before migration 0011 hold
none, and the load builds theirs from the turn's input and messages. A 1,000-turn
conversation beside 10,000 turns, seeded each way, ``--entries-rounds`` times in turn.

Then timers: a timer is set (with ``replaces``, as a reminder that moves) and one deleted for
every schedule record and fired wake, beside however many other conversations' timers are
pending. For each ``--pending-timers`` count, seeded in bulk and analysed, one client sets
and deletes one timer back to back: wall ms per call, median and p95.

    python -m bench.load_bench [--session-turns 10,1000,10000] [--table-turns 10000,200000]
                               [--silent-turns 0,1000,10000] [--entries-rounds 2]
                               [--pending-timers 1000,10000,50000,200000]
    make bench-load

Uses DATABASE_URL (a scratch database is created there and dropped per shape), else an
embedded PostgreSQL started for the run. Load goes to that server only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from contextlib import ExitStack

from bench.harness.databases import execute_sql, scratch_database
from bench.harness.percentiles import percentile
from bench.harness.saves import save_request
from store import SourceRecord, Store
from store.history import turn_entries

TOPIC = "inbound.turns"
HISTORY_LIMIT = 50  # the consumer's default (HISTORY_LIMIT)
SILENT_AFTER, SILENT_TABLE = 100, 10_000  # the conversation behind the silent turns; the log
ENTRIES_TURNS, ENTRIES_TABLE = 1_000, 10_000  # the stored-against-built entries conversation

_TURN_COLUMNS = (
    "session_id, version, input, messages, llm_calls, source_topic, source_partition,"
    " source_offset, input_id, created_at"
)


def _turns(rows: str, stored: bool) -> str:
    """An insert of the turn-log rows ``rows`` selects (``_TURN_COLUMNS``, in order), with the
    history entries each one's save would have stored, or (not ``stored``) none, as rows saved
    before migration 0011 hold."""
    if not stored:
        return f"INSERT INTO turns ({_TURN_COLUMNS})\n{rows};\n"
    entries = turn_entries("t.input", "t.messages", "t.created_at")
    return (
        f"INSERT INTO turns ({_TURN_COLUMNS}, history)\n"
        f"SELECT t.*, {entries} FROM (\n{rows}\n) AS t({_TURN_COLUMNS});\n"
    )


# One conversation's turns: a message in, a reply out, each with its source record and input
# id, as the consumer writes them; then its silent turns. ``{first}`` numbers the offsets so no
# two rows share one.
_SEED_MESSAGES = """
SELECT '{session}', g,
       jsonb_build_object('session_id', '{session}', 'message', 'oi ' || g, 'id', 'm' || g),
       jsonb_build_array(jsonb_build_object('kind', 'ai', 'text', 'Olá, tudo bem? ' || g)),
       1, '{topic}', 0, {first} + g, 'm' || g, now() - (({count} - g) || ' seconds')::interval
FROM generate_series(1, {count}) AS g"""
_SEED_SILENT = """
SELECT '{session}', {count} + g, jsonb_build_object('session_id', '{session}', 'wake', 'k' || g),
       '[]'::jsonb, 0, '{topic}', 0, {first} + {count} + g, NULL, now()
FROM generate_series(1, {silent}) AS g"""
_SEED_SESSION = """
INSERT INTO sessions (id, version, state)
VALUES ('{session}', {count} + {silent},
        '{{"id": "{session}", "v": 4, "data": {{"n": 1}}}}'::jsonb);
"""


# The other conversations' turns, 100 to a conversation, in one statement.
_SEED_OTHERS = """
SELECT 'other-' || (g / 100), g % 100 + 1,
       jsonb_build_object('message', 'oi ' || g, 'id', 'o' || g),
       jsonb_build_array(jsonb_build_object('kind', 'ai', 'text', 'Olá, tudo bem? ' || g)),
       1, '{topic}', 1, g, 'o' || g, now()
FROM generate_series(0, {count} - 1) AS g"""


def _seed(
    url: str, session_turns: int, table_turns: int, silent: int = 0, *, stored: bool = True
) -> str:
    """Seed the measured conversation (its ``silent`` turns last) and the others; return the
    measured one's id. Without ``stored`` the turns hold no history entries, as rows saved
    before migration 0011 do, and the load builds them."""
    measured = f"load-{uuid.uuid4().hex[:8]}"
    shape = {"session": measured, "count": session_turns, "silent": silent, "first": 0,
             "topic": TOPIC}
    sql = (
        _turns(_SEED_MESSAGES.format(**shape), stored)
        + _turns(_SEED_SILENT.format(**shape), stored)
        + _SEED_SESSION.format(**shape)
    )
    others = table_turns - session_turns
    if others > 0:
        sql += _turns(_SEED_OTHERS.format(count=others, topic=TOPIC), stored)
    asyncio.run(execute_sql(url, sql + "ANALYZE turns; ANALYZE sessions;"))
    return measured


async def _timed(
    url: str, session_id: str, version_now: int, entries: int, calls: int
) -> dict[str, list]:
    """Wall ms per load of ``session_id`` (at ``version_now``, giving ``entries`` history
    entries) and per save of a fresh conversation, one client."""

    store = await Store.connect(url, pool_size=1, max_overflow=0)
    offsets = iter(range(10**9, 2 * 10**9))
    saver = f"saver-{uuid.uuid4().hex[:8]}"
    version = 0
    samples: dict[str, list[float]] = {"load": [], "save": []}
    try:
        for n in range(calls + 20):  # the first 20 of each warm the connection and the plan
            began = time.perf_counter()
            loaded = await store.load(
                session_id,
                history_limit=HISTORY_LIMIT,
                sources=(SourceRecord(topic=TOPIC, partition=0, offset=next(offsets)),),
                input_ids=(f"new-{n}",),
            )
            load_ms = (time.perf_counter() - began) * 1000
            assert loaded.version == version_now and not loaded.applied, loaded
            assert len(loaded.history) == entries, (len(loaded.history), entries)
            began = time.perf_counter()
            await store.save_turn(save_request(saver, version, TOPIC, next(offsets)))
            version += 1
            _keep(samples, n, load=load_ms, save=(time.perf_counter() - began) * 1000)
    finally:
        await store.close()
    return samples


_SEED_TIMERS = """
INSERT INTO timers (session_id, key, at)
SELECT 'other-' || g, 'remind', now() + (g || ' seconds')::interval
FROM generate_series(1, {count}) AS g;
ANALYZE timers;
"""


async def _timer_calls(url: str, calls: int) -> dict[str, list[float]]:
    """Wall ms per timer set (replacing the one before) and per timer delete, one client."""
    from datetime import UTC, datetime, timedelta

    from store import TimerEntry

    store = await Store.connect(url, pool_size=1, max_overflow=0)
    at = datetime.now(UTC) + timedelta(days=1)
    samples: dict[str, list[float]] = {"set": [], "delete": []}
    try:
        for n in range(calls + 20):  # the first 20 warm the connection and the plan
            session = f"timed-{n}"
            entry = TimerEntry(key="remind-2", session_id=session, at=at, replaces="remind-1")
            began = time.perf_counter()
            await store.upsert_timers([entry])
            set_ms = (time.perf_counter() - began) * 1000
            began = time.perf_counter()
            deleted = await store.delete_timers([(session, "remind-2")])
            delete_ms = (time.perf_counter() - began) * 1000
            assert deleted == 1, deleted
            _keep(samples, n, set=set_ms, delete=delete_ms)
    finally:
        await store.close()
    return samples


def _entries(message_turns: int) -> int:
    """History entries a load gives for ``message_turns`` seeded turns (a message and a reply
    each)."""
    return min(HISTORY_LIMIT, 2 * message_turns)


def _keep(samples: dict[str, list[float]], n: int, **ms: float) -> None:
    """Keep call ``n``'s times, once the first 20 calls have warmed the connection and plan."""
    if n >= 20:
        for kind, value in ms.items():
            samples[kind].append(value)


def _load_header(first: str) -> None:
    """The column titles of a table of ``_load_row`` rows, ``first`` naming its first column."""
    print(f"{first:>13} {'table turns':>11} {'load p50 ms':>11} {'load p95 ms':>11}"
          f" {'save p50 ms':>11} {'load / save':>11}", flush=True)


def _load_row(
    shown: int | str, table_turns: int, message_turns: int, silent: int, calls: int,
    *, others_up_to: int | None = None, stored: bool = True,
) -> None:
    """Seed a scratch database with one conversation (``message_turns`` turns, then ``silent``
    ones) beside others' turns up to ``others_up_to`` (default ``table_turns``) in all, time its
    loads beside saves and print the row: ``shown``, ``table_turns`` and the timings."""
    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-load")
        measured = _seed(
            database.url, message_turns, others_up_to or table_turns, silent, stored=stored
        )
        samples = asyncio.run(_timed(
            database.url, measured, message_turns + silent, _entries(message_turns), calls
        ))
    load50, load95 = statistics.median(samples["load"]), percentile(samples["load"], 0.95)
    save50 = statistics.median(samples["save"])
    label = f"{shown:,}" if isinstance(shown, int) else shown
    print(f"{label:>13} {table_turns:>11,} {load50:>11.2f} {load95:>11.2f}"
          f" {save50:>11.2f} {load50 / save50:>10.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--session-turns", default="10,1000,10000",
                        help="turns logged for the measured conversation")
    parser.add_argument("--table-turns", default="10000,200000",
                        help="turns logged in all (the others' spread over conversations of 100)")
    parser.add_argument("--pending-timers", default="1000,10000,50000,200000",
                        help="other conversations' timers pending beside the measured ones")
    parser.add_argument("--silent-turns", default="0,1000,10000",
                        help="turns that sent nothing after a 100-turn conversation's messages")
    parser.add_argument("--entries-rounds", type=int, default=2,
                        help="rounds of the stored-against-built history entries table")
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind per shape")
    options = parser.parse_args()
    shapes = [
        (int(s), int(t))
        for t in options.table_turns.split(",")
        for s in options.session_turns.split(",")
        if int(s) <= int(t)
    ]
    _load_header("session turns")
    for session_turns, table_turns in shapes:
        _load_row(session_turns, table_turns, session_turns, 0, options.calls)

    # Turns that add nothing to the history (wakes and events that sent nothing) come last, so
    # the history read passes over all of them to find its entries.
    print()
    _load_header("silent turns")
    for silent in (int(n) for n in options.silent_turns.split(",")):
        _load_row(silent, SILENT_TABLE + silent, SILENT_AFTER, silent, options.calls,
                  others_up_to=SILENT_TABLE)

    # Where the history's entries come from: stored by each turn's save, or built by the load
    # (rows saved before migration 0011), alternating so both see the same host.
    print()
    _load_header("entries")
    for _ in range(options.entries_rounds):
        for stored in (True, False):
            _load_row("stored" if stored else "built", ENTRIES_TABLE, ENTRIES_TURNS, 0,
                      options.calls, stored=stored)

    print(f"\n{'pending timers':>14} {'set p50 ms':>10} {'set p95 ms':>10}"
          f" {'delete p50 ms':>13} {'delete p95 ms':>13}", flush=True)
    for pending in (int(n) for n in options.pending_timers.split(",")):
        with ExitStack() as stack:
            database = scratch_database(stack, prefix="turnflow-load")
            asyncio.run(execute_sql(database.url, _SEED_TIMERS.format(count=pending)))
            timed = asyncio.run(_timer_calls(database.url, options.calls))
        print(f"{pending:>14,} {statistics.median(timed['set']):>10.2f}"
              f" {percentile(timed['set'], 0.95):>10.2f}"
              f" {statistics.median(timed['delete']):>13.2f}"
              f" {percentile(timed['delete'], 0.95):>13.2f}", flush=True)


if __name__ == "__main__":
    main()
