"""Scratch databases for migration tests, and blocking helpers that stay off the test's loop.

Alembic's env calls `asyncio.run`, so everything here runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

T = TypeVar("T")


def off_loop(function: Callable[..., T], *args: Any) -> T:
    """Run blocking work (alembic, asyncio.run) in a thread of its own."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    """The rows of one query, read on a connection of its own."""
    async def read() -> list[tuple[Any, ...]]:
        connection = await asyncpg.connect(url)
        try:
            return [tuple(r) for r in await connection.fetch(sql)]
        finally:
            await connection.close()

    return off_loop(asyncio.run, read())


def execute(url: str, sql: str) -> None:
    """Run one statement on a connection of its own."""
    async def run() -> None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    off_loop(asyncio.run, run())


@pytest.fixture
def scratch_url(database_url: str) -> Iterator[str]:
    """An empty database beside the session's, dropped after the test."""
    name = f"turnflow_m_{uuid.uuid4().hex[:12]}"
    execute(database_url, f'CREATE DATABASE "{name}"')
    try:
        yield make_url(database_url).set(database=name).render_as_string(hide_password=False)
    finally:
        execute(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
