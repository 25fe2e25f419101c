"""What the long-running services check and start before they connect: servers and health port."""

from __future__ import annotations

import asyncio
import socket

import pytest

from consumer.health import start_health_server
from consumer.settings import Settings


def test_a_service_without_a_broker_names_the_missing_variable() -> None:
    """A service with no KAFKA_BOOTSTRAP_SERVERS is refused, whatever else is set."""
    settings = Settings(kafka_bootstrap_servers=None, database_url="postgresql://x/y")
    with pytest.raises(ValueError, match=r"^KAFKA_BOOTSTRAP_SERVERS is not set$"):
        settings.require_servers()


def test_a_service_without_a_database_names_the_missing_variable() -> None:
    """A service that opens its own store needs DATABASE_URL."""
    settings = Settings(kafka_bootstrap_servers="127.0.0.1:9092", database_url=None)
    with pytest.raises(ValueError, match=r"^DATABASE_URL is not set$"):
        settings.require_servers()


def test_a_service_given_a_store_needs_no_database_url() -> None:
    """With database=False only the broker is required."""
    settings = Settings(kafka_bootstrap_servers="127.0.0.1:9092", database_url=None)
    settings.require_servers(database=False)
    with pytest.raises(ValueError, match="KAFKA_BOOTSTRAP_SERVERS"):
        Settings(kafka_bootstrap_servers="", database_url=None).require_servers(database=False)


async def test_metrics_port_zero_starts_no_health_server() -> None:
    """METRICS_PORT=0 means no health server at all."""
    assert await start_health_server(Settings(metrics_port=0), ready=lambda: True) is None


async def test_health_server_listens_on_the_configured_port() -> None:
    """A non-zero METRICS_PORT is served on METRICS_HOST and answers /readyz from ready()."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await start_health_server(
        Settings(metrics_port=port, metrics_host="127.0.0.1"), ready=lambda: False
    )
    assert server is not None
    try:
        assert server.port == port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        response = await reader.read()
        writer.close()
        await writer.wait_closed()
    finally:
        await server.stop()
    assert response.startswith(b"HTTP/1.0 503")
