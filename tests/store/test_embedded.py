"""The embedded PostgreSQL used by `turnflow dev` and by tests without a server."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from store.embedded import EmbeddedPostgres, start_embedded_postgres


async def _version(url: str) -> str:
    connection = await asyncpg.connect(url, timeout=10)
    try:
        return str(await connection.fetchval("SHOW server_version"))
    finally:
        await connection.close()


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory outside pytest's basetemp, which pytest keeps at mode 0700."""
    root = Path(tempfile.mkdtemp(prefix="turnflow-pg-test-"))
    try:
        yield root / "data"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_embedded_server_starts_is_reused_and_stops(data_dir: Path) -> None:
    """A started server answers on its TCP URL; a second start reuses it; stop ends it."""
    server = EmbeddedPostgres(data_dir)
    url = server.start()
    try:
        assert url.startswith("postgresql://postgres@127.0.0.1:")
        assert server.is_running()
        assert asyncio.run(_version(url))
        assert start_embedded_postgres(data_dir) == url
    finally:
        server.stop()
    assert not EmbeddedPostgres(data_dir).is_running()
