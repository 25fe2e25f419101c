"""Sessions that start some way into their conversation: their state after ``turns`` earlier
turns of the stand-in agent and those turns' log, written straight into the database, so a
run's loads read the history such a conversation has."""

from __future__ import annotations

from typing import Any

from bench.harness.stand_in_model import bench_agent

__all__ = ["checkpoint", "seed_history"]

_SEED_SESSIONS = """
INSERT INTO sessions (id, version, state)
SELECT s.id, $2, jsonb_set(CAST($3 AS jsonb), '{id}', to_jsonb(s.id))
FROM unnest(CAST($1 AS text[])) AS s(id)
"""

# Each earlier turn: a customer message and one reply, as the consumer logs a turn of the bench
# agent (no source record: these turns were never on the topic), with the history entries its
# save would have stored.
_SEED_TURNS = """
INSERT INTO turns (session_id, version, input, messages, llm_calls, input_id, created_at, history)
SELECT t.*, {entries} FROM (
    SELECT s.id, g,
           jsonb_build_object('session_id', s.id, 'message', 'mensagem anterior ' || g,
                              'id', 'h' || g),
           jsonb_build_array(jsonb_build_object(
               'kind', 'ai', 'text', 'Resposta anterior número ' || g || ', em uma frase.')),
           1, 'h' || g, now() - (($2 - g) || ' minutes')::interval
    FROM unnest(CAST($1 AS text[])) AS s(id), generate_series(1, $2) AS g
) AS t(session_id, version, input, messages, llm_calls, input_id, created_at)
"""


async def checkpoint(connection: Any) -> None:
    """Write the seeded rows out now. Seeding 1,000 sessions 100 turns in writes a few hundred
    MB of WAL; left alone, the checkpoint that volume triggers ran 45 s into the measured runs,
    and two of them went at a seventh of their rate with the server's CPU per turn five times
    its usual. ``CHECKPOINT`` needs a superuser or ``pg_checkpoint``: without either the run
    goes on, and says so."""
    import asyncpg

    try:
        await connection.execute("CHECKPOINT")
    except asyncpg.InsufficientPrivilegeError:
        print("  (no CHECKPOINT after seeding: the role may not; a checkpoint the seeded WAL "
              "triggers may fall in a measured run)", flush=True)


async def seed_history(url: str, session_ids: list[str], turns: int) -> None:
    """Give every session ``turns`` earlier turns: its state after them and their turn log, so
    each load reads the history a conversation that far along has (2 entries a turn, up to the
    consumer's ``HISTORY_LIMIT``)."""
    import asyncpg

    from consumer.settings import Settings
    from store import Store
    from store.history import turn_entries
    from store.jsoncodec import dumps
    from store.urls import plain_url

    # The consumer's default, which the benchmark's consumer runs with.
    history_limit = Settings.model_fields["history_limit"].default

    agent = bench_agent(0)
    state: Any = None
    for n in range(1, turns + 1):
        request: dict[str, Any] = {"session_id": "seed", "message": f"mensagem anterior {n}",
                                   "id": f"h{n}"}
        if state is not None:
            request["session"] = state
        state = (await agent.turn(request)).session.model_dump(mode="json")
    connection = await asyncpg.connect(plain_url(url))
    try:
        await connection.execute(_SEED_SESSIONS, session_ids, turns, dumps(state))
        entries = turn_entries("t.input", "t.messages", "t.created_at")
        await connection.execute(
            _SEED_TURNS.replace("{entries}", entries), session_ids, turns
        )
        # Vacuumed as well as analysed: autovacuum would otherwise take up the seeded rows
        # while the run is measured, and bill its CPU to the turns.
        for table in ("sessions", "turns"):
            await connection.execute(f"VACUUM ANALYZE {table}")
        await checkpoint(connection)
    finally:
        await connection.close()
    store = await Store.connect(url, pool_size=1, max_overflow=0)
    try:  # what the consumer will read back: the version and the whole history window
        loaded = await store.load(session_ids[-1], history_limit=history_limit)
    finally:
        await store.close()
    assert loaded.version == turns, loaded.version
    assert len(loaded.history) == min(history_limit, 2 * turns), len(loaded.history)
    assert loaded.state is not None and loaded.state["id"] == session_ids[-1], loaded.state
