"""The end-to-end benchmark writes its seeded rows out before it measures, where it may."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from bench.harness.history import checkpoint


class _Connection:
    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.executed: list[str] = []

    async def execute(self, sql: str) -> Any:
        self.executed.append(sql)
        if self.refuse:
            raise asyncpg.InsufficientPrivilegeError("must be superuser or pg_checkpoint")
        return "CHECKPOINT"


async def test_a_checkpoint_is_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    connection = _Connection(refuse=False)
    await checkpoint(connection)
    assert connection.executed == ["CHECKPOINT"]
    assert capsys.readouterr().out == ""


async def test_a_role_that_may_not_checkpoint_goes_on_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    connection = _Connection(refuse=True)
    await checkpoint(connection)
    assert connection.executed == ["CHECKPOINT"]
    assert "no CHECKPOINT after seeding" in capsys.readouterr().out


async def test_the_server_checkpoints_for_a_superuser(database_url: str) -> None:
    from store.urls import plain_url

    connection = await asyncpg.connect(plain_url(database_url))
    # The control file names the last checkpoint's record as soon as it is written (the
    # statistics views are reported later, after the caller is let go).
    last = "SELECT checkpoint_lsn FROM pg_control_checkpoint()"
    try:
        before = await connection.fetchval(last)
        await checkpoint(connection)
        after = await connection.fetchval(last)
    finally:
        await connection.close()
    assert after > before
