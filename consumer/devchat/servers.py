"""Bringing up what a chat needs in one process: PostgreSQL (embedded, fresh for the run, or
``DATABASE_URL``), a broker (embedded, in memory, or ``KAFKA_BOOTSTRAP_SERVERS``), the schema,
the topics, and the consumer and scheduler as two tasks (``DevServices``). Every failure a
newcomer can meet is one line (``DevError``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url

from consumer.devchat.embedded_broker import EmbeddedBroker
from consumer.errors import ConsumerError, DevError, EmbeddedBrokerError
from consumer.errors import first_line as _first_line
from consumer.processes import free_port
from consumer.scheduler.service import Scheduler, build_scheduler
from consumer.settings import Settings
from consumer.topics import TopicSpec, ensure_topics
from consumer.turns.service import ConsumerService
from store import EmbeddedPostgres, EmbeddedServerError, Store
from store.migrate import upgrade_async
from store.urls import plain_url

__all__ = [
    "DevServices",
    "bring_up_broker",
    "bring_up_database",
    "cancel",
    "check_port_free",
    "create_topics",
    "dev_metrics",
    "migrate",
    "new_run_id",
    "run_topics",
]


class DevServices:
    """``turnflow consume`` and ``turnflow schedule`` as two tasks of this process."""

    def __init__(self, settings: Settings, agent: Any) -> None:
        self._settings = settings
        self._agent = agent
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._store: Store | None = None
        self.consumer: ConsumerService | None = None
        self.scheduler: Scheduler | None = None

    async def start(self, ready_within: float = 60.0) -> None:
        s = self._settings
        bootstrap = s.kafka_bootstrap_servers or ""
        options = s.kafka_client_options()
        self._store = await Store.connect(s.database_url or "", pool_size=5)
        self.consumer = ConsumerService(
            s, self._agent, store=self._store, metrics_exports=("consume", "schedule")
        )
        self.scheduler = build_scheduler(
            self._store,
            bootstrap_servers=bootstrap,
            schedule_topic=s.schedule_topic,
            inbound_topic=s.inbound_topic,
            group_id=f"{s.group_id}-scheduler",
            client_options=options,
            positions=True,
        )
        self._tasks = [
            asyncio.create_task(self.consumer.run(), name="dev-consumer"),
            asyncio.create_task(self.scheduler.run(self._stop), name="dev-scheduler"),
        ]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ready_within
        while not (self.consumer.started.is_set() and self.scheduler.started):
            for task in self._tasks:
                if task.done():
                    error = task.exception()
                    raise DevError(f"{task.get_name()[4:]} stopped during startup: "
                                   f"{_first_line(error) if error else 'no reason given'}")
            if loop.time() > deadline:
                raise DevError(f"the consumer and scheduler were not ready within "
                               f"{ready_within:.0f}s; see the dev log")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self._stop.set()
        if self.consumer is not None:
            self.consumer.stop()
        for task in self._tasks:
            try:
                await asyncio.wait_for(asyncio.shield(task), 30)
            except TimeoutError:
                await cancel(task)
            except Exception:
                logging.getLogger("turnflow.dev").exception("service ended with an error")
        if self._store is not None:
            await self._store.close()


def check_port_free(host: str, port: int, setting: str) -> None:
    """Refuse early, in one line, when another process holds a port this process must bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            raise DevError(
                f"port {port} is in use ({setting}); stop the process using it "
                f"or set {setting} to another port ({setting}=0 turns it off)"
            ) from None


def dev_metrics(settings: Settings) -> Settings:
    """The dev chat's metrics port: ``METRICS_PORT`` when set, else a free port the kernel picks
    (a node exporter or another turnflow on the default port must not stop a chat), bound to
    127.0.0.1 unless ``METRICS_HOST`` says otherwise: a developer's machine does not publish
    its metrics to the network."""
    updates: dict[str, Any] = {}
    if "metrics_host" not in settings.model_fields_set:
        updates["metrics_host"] = "127.0.0.1"
    if settings.metrics_port is None:
        updates["metrics_port"] = free_port(updates.get("metrics_host", settings.metrics_host))
    return settings.model_copy(update=updates) if updates else settings


def _host_port(url: str) -> str:
    parsed = urlsplit(url)
    return f"{parsed.hostname or '?'}:{parsed.port or 5432}"


async def bring_up_database(
    settings: Settings, data_dir: Path, stack: contextlib.AsyncExitStack,
    status: Callable[[str], None],
) -> str:
    if settings.database_url:
        await _probe_database(settings.database_url)
        status(f"  postgres  {_host_port(settings.database_url)} (DATABASE_URL)")
        return settings.database_url
    server = EmbeddedPostgres(data_dir / "postgres")
    reused = _server_running(data_dir / "postgres")
    starting = asyncio.ensure_future(asyncio.to_thread(server.start))
    if not reused:  # a server another dev run started is left to it
        # Registered before it starts: a stop signal during the start still stops it, once
        # the start (a thread, which a cancel does not end) is over.
        stack.push_async_callback(_stop_once_started, server, starting)
    try:
        url = await asyncio.shield(starting)
    except EmbeddedServerError as exc:
        raise DevError(f"the embedded PostgreSQL did not start: {_first_line(exc)}") from None
    # A fresh database per run: the embedded broker starts empty, so a turn log kept from an
    # earlier run would take the new run's offsets for replays and skip them.
    database = await _fresh_database(url)
    stack.push_async_callback(_drop_database, url, database)
    status(f"  postgres  embedded at {_host_port(url)}, database {database}: new for this run "
           "(every run starts a fresh conversation; nothing from earlier runs is kept)")
    return make_url(url).set(database=database).render_as_string(hide_password=False)


async def _stop_once_started(server: EmbeddedPostgres, starting: asyncio.Future[str]) -> None:
    with contextlib.suppress(Exception):
        await starting
    if not starting.cancelled() and starting.exception() is None:
        await asyncio.to_thread(server.stop)


async def _fresh_database(admin_url: str) -> str:
    """Create this run's database; drop those of earlier runs that nobody is connected to."""
    import asyncpg

    name = f"turnflow_dev_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(plain_url(admin_url), timeout=10)
    try:
        leftovers = await connection.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE 'turnflow\\_dev\\_%' "
            "AND datname NOT IN (SELECT datname FROM pg_stat_activity WHERE datname IS NOT NULL)"
        )
        for row in leftovers:
            with contextlib.suppress(asyncpg.PostgresError):
                await connection.execute(f'DROP DATABASE IF EXISTS "{row["datname"]}"')
        await connection.execute(f'CREATE DATABASE "{name}"')  # name is ours: hex only
    finally:
        await connection.close()
    return name


async def _drop_database(admin_url: str, name: str) -> None:
    import asyncpg

    with contextlib.suppress(OSError, asyncpg.PostgresError):
        connection = await asyncpg.connect(plain_url(admin_url), timeout=10)
        try:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await connection.close()


def _server_running(data_dir: Path) -> bool:
    """Whether a PostgreSQL already runs on this data directory (its pid file names a live pid)."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, 0)
    except PermissionError:  # alive, owned by the server's own user
        return True
    except (OSError, ValueError, IndexError):
        return False
    return True


async def _probe_database(url: str) -> None:
    import asyncpg

    try:
        connection = await asyncpg.connect(plain_url(url), timeout=10)
    except (OSError, TimeoutError, asyncpg.PostgresError, ValueError) as exc:
        reason = _first_line(exc) or type(exc).__name__
        raise DevError(
            f"cannot reach PostgreSQL at {_host_port(url)} (DATABASE_URL): {reason}"
        ) from None
    await connection.close()


async def bring_up_broker(
    settings: Settings, stack: contextlib.AsyncExitStack, status: Callable[[str], None]
) -> str:
    if settings.kafka_bootstrap_servers:
        await _probe_broker(settings)
        status(f"  broker    {settings.kafka_bootstrap_servers} (KAFKA_BOOTSTRAP_SERVERS)")
        return settings.kafka_bootstrap_servers
    broker = EmbeddedBroker()
    try:
        await asyncio.to_thread(broker.start)
    except EmbeddedBrokerError as exc:
        raise DevError(f"the embedded broker did not start: {_first_line(exc)}") from None
    stack.callback(broker.stop)
    status(f"  broker    embedded at {broker.bootstrap_servers} (in memory)")
    return broker.bootstrap_servers


async def _probe_broker(settings: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaConnectionError, KafkaError

    servers = settings.kafka_bootstrap_servers or ""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=servers, request_timeout_ms=10000, **settings.kafka_client_options()
    )
    try:
        await asyncio.wait_for(admin.start(), 15)
    except (KafkaConnectionError, TimeoutError):
        raise DevError(
            f"cannot reach the Kafka broker at {servers} (KAFKA_BOOTSTRAP_SERVERS): "
            "no broker answered"
        ) from None
    except (KafkaError, OSError) as exc:
        reason = _first_line(exc)
        raise DevError(
            f"cannot reach the Kafka broker at {servers} (KAFKA_BOOTSTRAP_SERVERS): {reason}"
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


def run_topics(settings: Settings, run_id: str) -> dict[str, str]:
    """Topic names for one run against the embedded broker: each configured name with the run
    id after it, so no record of this run is taken for an earlier run's in the turn log."""
    return {
        name: f"{getattr(settings, name)}.{run_id}"
        for name in ("inbound_topic", "messages_topic", "schedule_topic", "dlq_topic")
    }


def new_run_id() -> str:
    return f"run-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


async def migrate(url: str) -> None:
    try:
        await upgrade_async(url)
    except Exception as exc:
        raise DevError(f"migrating the database failed: {_first_line(exc)}") from None


async def create_topics(settings: Settings) -> None:
    topics = [
        TopicSpec(name, partitions=1)
        for name in (settings.inbound_topic, settings.messages_topic, settings.schedule_topic,
                     settings.dlq_topic)
    ]
    try:
        await ensure_topics(
            settings.kafka_bootstrap_servers or "", topics,
            client_options=settings.kafka_client_options(),
        )
    except ConsumerError as exc:
        raise DevError(f"creating topics failed: {_first_line(exc)}") from None


async def cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
