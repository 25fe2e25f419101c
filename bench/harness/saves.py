"""The save transaction a consumer makes for a turn (session, turn log, outbox), on its own:
what a turn's save costs, the yardstick the end-to-end, load and migration benchmarks measure
a turn against."""

from __future__ import annotations

import asyncio
import time
import uuid

from sqlalchemy import event, text

from store import OutboxEntry, SaveRequest, SourceRecord, Store, TurnRecord, direct

__all__ = ["STATE", "forget", "save_request", "saves_per_second"]

STATE = {
    "id": "",
    "v": 4,
    "data": {f"field_{i}": f"value {i} " * 4 for i in range(20)},
    "runs": [{"id": "r1", "flow_id": "checkout", "status": "asking", "step_id": "ask_email",
              "visit": 3, "input": {}, "asked": {"email": 1},
              "started_at": "2026-11-30T06:00:00Z"}],
    "claims": {"email": "r1"},
    "inputs": [f"wamid.{i}" for i in range(50)],
    "metadata": {},
    "last_user_at": "2026-11-30T06:00:00Z",
    "last_assistant_at": "2026-11-30T06:00:01Z",
}


def save_request(session_id: str, version: int, topic: str, offset: int) -> SaveRequest:
    """A turn's save as the consumer makes it: the session's state, a reply, a timer and the
    outcome, the reply and the timer in the outbox, read at ``offset`` of ``topic``."""
    reply = {"kind": "ai", "text": "Qual é o seu e-mail?", "key": f"{session_id}:{version}:0",
             "after_ms": 0, "run_id": "r1", "step_id": "ask_email"}
    timer = {"key": f"{session_id}:remind", "at": "2026-11-30T07:00:00Z", "replaces": None}
    return SaveRequest(
        session_id=session_id,
        expected_version=version,
        state={**STATE, "id": session_id},
        turn=TurnRecord(
            input={"session_id": session_id, "message": "oi", "id": f"wamid.{offset}"},
            messages=[reply],
            schedule=[timer],
            outcomes=[{"code": "asked", "run_id": "r1", "flow_id": "checkout",
                       "step_id": "ask_email", "status": "asking", "detail": None,
                       "llm_calls": 1}],
            llm_calls=2,
            source=SourceRecord(topic=topic, partition=0, offset=offset),
        ),
        outbox=[
            OutboxEntry("outbound.messages", session_id, {**reply, "session_id": session_id}),
            OutboxEntry("outbound.schedule", session_id, {**timer, "session_id": session_id}),
        ],
    )


async def saves_per_second(
    url: str, clients: int, seconds: float, *, grouped: bool = False
) -> tuple[float, float, float]:
    """Run `clients` savers for `seconds`; return (saves/s, statements/save, client CPU ms/save).
    With `grouped`, the savers go through the consumer's `SaveGroup` (saves in flight at the
    same time share one statement) instead of calling `Store.save_turn` each."""
    from consumer.groups import SaveGroup

    store = await Store.connect(url, pool_size=clients, max_overflow=0)
    group = SaveGroup(store)
    save = group.save if grouped else store.save_turn
    statements = 0

    def count(*_: object) -> None:
        nonlocal statements
        statements += 1

    event.listen(store._engine.sync_engine, "before_cursor_execute", count)
    direct.statement_listeners.append(count)
    run = uuid.uuid4().hex[:8]
    offsets = iter(range(10**12))
    saves = 0
    deadline = 0.0

    async def saver(n: int) -> None:
        nonlocal saves
        session_id = f"bench-{run}-{n}"
        topic = f"inbound.turns.{run}"
        version = 0
        while time.perf_counter() < deadline:
            await save(save_request(session_id, version, topic, next(offsets)))
            version += 1
            saves += 1

    runs = [run]
    try:
        deadline = time.perf_counter() + 0.5  # warm the pool and prepared statements
        await asyncio.gather(*(saver(n) for n in range(clients)))
        run = uuid.uuid4().hex[:8]
        runs.append(run)
        saves = statements = 0
        started, cpu_started = time.perf_counter(), time.process_time()
        deadline = started + seconds
        await asyncio.gather(*(saver(n) for n in range(clients)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        # The cleanup's statements are not saves: stop counting first.
        direct.statement_listeners.remove(count)
        event.remove(store._engine.sync_engine, "before_cursor_execute", count)
        try:
            await forget(store, runs)
        finally:
            await store.close()
    return saves / elapsed, statements / max(saves, 1), cpu * 1000 / max(saves, 1)


async def forget(store: Store, runs: list[str]) -> None:
    """Delete what the savers wrote. Their outbox rows are never published: left behind in a
    database a consumer later uses (the end-to-end benchmark's), its relay would spend its
    first seconds sending tens of thousands of them."""
    async with store.engine.connect() as connection:
        for run in runs:
            pattern = {"pattern": f"bench-{run}-%"}
            for table in ("outbox", "turns", "sessions"):
                column = "id" if table == "sessions" else "session_id"
                await connection.execute(
                    text(f"DELETE FROM {table} WHERE {column} LIKE :pattern"), pattern
                )
