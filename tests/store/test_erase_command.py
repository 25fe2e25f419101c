"""``turnflow erase`` from the command line, and what the inspector and replays say after it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumer.cli import main
from store import Store
from tests.store.conversations import fill, table_rows

IDS = [f"conv-{n:02d}~" for n in range(8)]

HOSTILE = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec=None, categories=None), max_size=40),  # surrogates, NUL, controls
    st.text(min_size=900, max_size=1200),
    st.sampled_from([
        "", "\x00", "a\x00", "'; DROP TABLE turns; --", "' OR '1'='1", "%", "_", "\\", "%:%",
        "conv-0", "conv-%", "conv-0_~", ":", "\u202e\u0000", "🙂" * 300, " ", "\n",
    ]),
)


@pytest.fixture
async def filled(store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    await asyncio.gather(*(fill(store, sid, turns=2) for sid in IDS))
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.delenv("INSPECT_DATABASE_URL", raising=False)
    return store


async def test_the_command_prints_what_it_removed_per_table(
    filled: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await asyncio.to_thread(main, ["erase", "--session", IDS[3]]) == 0
    out = capsys.readouterr().out
    assert 'erased session "conv-03~"' in out
    for line in ("sessions: 1 rows", "turns: 2 rows", "turn_recordings: 2 rows",
                 "turn_sources: 2 rows", "outbox: 2 rows", "timers: 1 rows",
                 "dead_lettered_sources: 2 rows", "dead_letters: 1 rows",
                 "credit_ledger: 2 rows kept"):
        assert line in out
    assert await asyncio.to_thread(main, ["erase", "--session", IDS[3]]) == 0
    assert "already erased at" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["erase", "--session", "nobody"]) == 3
    assert 'nothing is stored for session "nobody"' in capsys.readouterr().err
    assert await asyncio.to_thread(main, ["erase", "--customer", "conv-05~"]) == 0
    assert "erased customer" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["erase", "--session="]) == 2
    assert "an empty id names no conversation" in capsys.readouterr().err


async def test_the_inspector_and_replays_say_erased(
    filled: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert await asyncio.to_thread(main, ["erase", "--session", IDS[1]]) == 0
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["inspect", IDS[1]]) == 3
    assert "was erased at" in capsys.readouterr().err
    assert await asyncio.to_thread(main, ["inspect", "never-was"]) == 3
    assert "no conversation" in capsys.readouterr().err
    code = await asyncio.to_thread(main, ["replay", "export", "--out", str(tmp_path),
                                          "--session", IDS[1], "--session", IDS[2]])
    captured = capsys.readouterr()
    assert code == 0
    assert "'conv-01~' was erased at" in captured.err and "not replayed" in captured.err
    assert "wrote 1 conversations" in captured.out


async def test_hostile_ids_are_refused_with_a_reason_or_erased_never_a_traceback(
    filled: Store, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any text as ``--session`` or ``--customer``: exit 0 (erased), 2 (refused, one line
    saying why) or 3 (nothing stored); the conversations it does not name stay row for row."""
    before = await table_rows(database_url)

    @settings(max_examples=60, suppress_health_check=list(HealthCheck))
    @given(value=HOSTILE, customer=st.booleans())
    def erase_anything(value: str, customer: bool) -> None:
        option = "--customer" if customer else "--session"
        code = main(["erase", f"{option}={value}"])
        err = capsys.readouterr().err
        assert code in (0, 2, 3), (code, err)
        if code == 2:
            assert err.startswith("turnflow: refusing to erase") and err.count("\n") == 1
        if code == 0:
            assert value in IDS

    await asyncio.to_thread(erase_anything)
    assert await table_rows(database_url) == before
