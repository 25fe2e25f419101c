"""The previous release runs on the schema this release migrates to.

During an upgrade the old pods keep serving while `turnflow migrate` of the new release runs,
and after a rollback they serve on the new schema again. So: the previous release (the commit
in tests/fixtures/previous_release.txt, installed into its own virtualenv) migrates an empty
database as it would have, this release migrates it to head, and then the previous release's
own `turnflow consume`, `schedule` and `relay` processes serve several conversations at once on
Kafka, each with a timer. Every conversation gets its own reply and its own wake's reply, and
nothing is dead-lettered.
"""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from consumer.processes import free_port
from store import migrate
from tests.fixtures import previous_release
from tests.integration.harness import OutboundReader, message, produce, verbatim_texts
from tests.store.migration_dbs import off_loop, scratch_url

__all__ = ["scratch_url"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

_AGENT = textwrap.dedent('''
    """Echoes each conversation's message, waits 1.5 s on a timer, then says it again."""
    from typing import Any

    from engine import Agent, ok


    def agent() -> Agent:
        async def keep(ctx: Any) -> Any:
            return ok(data={"n": int(ctx.data.get("n") or 0) + 1,
                            "last": str(ctx.context.get("label", ""))})

        async def mark(ctx: Any) -> Any:
            return ok(data={"nudged": True})

        return Agent(
            name="Lembrete",
            fields={"n": {"type": "integer"}, "last": {"type": "string"},
                    "nudged": {"type": "boolean"}},
            actions={"keep": keep, "mark": mark},
            flows=[{
                "id": "greet",
                "on": [{"message": []}],
                "steps": [
                    {"id": "keep", "do": "keep"},
                    {"id": "say", "say": "{{n}}:{{last}}"},
                    # A `do` after the wait makes it a real timer, not an inline delay.
                    {"id": "w", "wait": {"ms": 1500}, "then": "mark", "else": "end"},
                    {"id": "mark", "do": "mark"},
                    {"id": "nudge", "say": "still there, {{last}}?"},
                ],
            }],
        )
''')


@pytest.fixture(scope="module")
def previous() -> Iterator[Path]:
    """The previous release's `turnflow` (installed once per commit, then cached)."""
    yield previous_release.install() / "venv" / "bin" / "turnflow"


async def _ready(port: int) -> None:
    async with httpx.AsyncClient() as client, asyncio.timeout(60):
        while True:
            try:
                if (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)


async def _count(url: str, sql: str, *args: object) -> int:
    connection = await asyncpg.connect(url)
    try:
        return int(await connection.fetchval(sql, *args))
    finally:
        await connection.close()


async def test_the_previous_release_serves_on_this_releases_schema(
    previous: Path, scratch_url: str, kafka_bootstrap: str, kafka_is_embedded: bool,
    tmp_path: Path,
) -> None:
    (tmp_path / "reminder_agent.py").write_text(_AGENT)
    suffix = uuid.uuid4().hex[:8]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(tmp_path),  # the agent only: the previous release's own code runs
        "DATABASE_URL": scratch_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "INBOUND_TOPIC": f"inbound.turns.prev.{suffix}",
        "MESSAGES_TOPIC": f"outbound.messages.prev.{suffix}",
        "SCHEDULE_TOPIC": f"outbound.schedule.prev.{suffix}",
        "DLQ_TOPIC": f"inbound.turns.dlq.prev.{suffix}",
        "TOPIC_PARTITIONS": "3",
        "GROUP_ID": f"prev-{suffix}",
        "METRICS_HOST": "127.0.0.1",
        "HEARTBEAT_INTERVAL_MS": "500",
        "SESSION_TIMEOUT_MS": "6000",
        "RELAY_INTERVAL_MS": "200",
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if kafka_is_embedded else "true",
    }

    async def command(*args: str) -> None:
        process = await asyncio.create_subprocess_exec(
            str(previous), *args, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
        assert process.returncode == 0, (args, out, err)

    await command("migrate")  # the previous release's schema, as its deployment has it
    await command("topics")
    await asyncio.to_thread(off_loop, migrate.upgrade, scratch_url)  # this release's head
    assert await asyncio.to_thread(off_loop, migrate.current, scratch_url) == migrate.head()

    ports = {"consume": free_port(), "schedule": free_port(), "relay": free_port()}
    services: list[asyncio.subprocess.Process] = []
    try:
        for name, extra in (("consume", ["--workers", "1", "--agent", "reminder_agent:agent"]),
                            ("schedule", ["--max-idle", "0.5"]),
                            ("relay", ["--grace-ms", "0"])):
            services.append(await asyncio.create_subprocess_exec(
                str(previous), name, *extra, env={**env, "METRICS_PORT": str(ports[name])},
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            ))
        await _ready(ports["consume"])
        await _ready(ports["schedule"])

        sessions = [f"prev{i}-{suffix}" for i in range(12)]
        await produce(kafka_bootstrap, env["INBOUND_TOPIC"],
                      [message(s, f"hello-{s}") for s in sessions])
        async with OutboundReader(kafka_bootstrap, env["MESSAGES_TOPIC"]) as replies:
            values = await replies.until(
                lambda v: all(len(verbatim_texts(v).get(s, [])) >= 2 for s in sessions),
                within=90,
            )
        texts = verbatim_texts(values)
        for s in sessions:  # each conversation's own reply and its own timer's, nothing else
            assert texts[s] == [f"1:hello-{s}", f"still there, hello-{s}?"], (s, texts[s])
        assert set(texts) == set(sessions)
        for process in services:
            process.send_signal(signal.SIGTERM)
        for process in services:
            assert await asyncio.wait_for(process.wait(), timeout=60) == 0
    finally:
        for process in services:
            if process.returncode is None:
                process.kill()
                await process.wait()

    ids = list(sessions)
    assert await _count(scratch_url, "SELECT count(*) FROM dead_letters") == 0
    assert await _count(scratch_url, "SELECT count(*) FROM dead_lettered_sources") == 0
    # A message turn and a wake turn per conversation, all written by the previous release.
    assert await _count(scratch_url, "SELECT count(*) FROM turns WHERE session_id = ANY($1)",
                        ids) == 2 * len(ids)
    assert await _count(scratch_url, "SELECT count(*) FROM timers") == 0  # every timer fired
    assert await _count(scratch_url,
                        "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0
    async with OutboundReader(kafka_bootstrap, env["DLQ_TOPIC"]) as dlq:
        assert await dlq.settle(2.0) == []


_SCHEMA = {
    "columns": "SELECT table_name, column_name, data_type, is_nullable, column_default,"
               " is_generated, identity_generation FROM information_schema.columns"
               " WHERE table_schema = 'public'",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes"
               " WHERE schemaname = 'public'",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid),"
                   " convalidated FROM pg_constraint"
                   " WHERE connamespace = 'public'::regnamespace",
    "valid": "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
             " WHERE NOT i.indisvalid",
}


async def _schema(url: str) -> dict[str, set[tuple[object, ...]]]:
    connection = await asyncpg.connect(url)
    try:
        return {name: {tuple(r) for r in await connection.fetch(sql)}
                for name, sql in _SCHEMA.items()}
    finally:
        await connection.close()


async def test_the_rewritten_revisions_make_the_previous_releases_schema(
    previous: Path, database_url: str,
) -> None:
    """Revisions 0001-0018, rewritten to run online, produce exactly the schema the previous
    release's own revisions produce (columns, indexes, constraints): a database that already
    ran them needs nothing."""
    urls = []
    names = [f"turnflow_sc_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    admin = await asyncpg.connect(database_url)
    try:
        for name in names:
            await admin.execute(f'CREATE DATABASE "{name}"')
        from sqlalchemy.engine import make_url

        urls = [make_url(database_url).set(database=n).render_as_string(hide_password=False)
                for n in names]
        process = await asyncio.create_subprocess_exec(
            str(previous), "migrate", env={"PATH": os.environ.get("PATH", ""),
                                           "DATABASE_URL": urls[0]},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _out, err = await process.communicate()
        assert process.returncode == 0, err
        await asyncio.to_thread(off_loop, migrate.upgrade, urls[1], "0018")
        before, after = await _schema(urls[0]), await _schema(urls[1])
        assert before["columns"] and before["indexes"]
        assert after == before
        assert after["valid"] == set()
    finally:
        for name in names:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
