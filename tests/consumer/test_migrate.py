"""``agents activate AGENT V --migrate MAP``: conversations pinned to an older version whose
every run is mapped move to V at their next turn (the map in that turn's request, so it is
recorded and replays); a conversation with an unmapped run stays pinned; a map naming steps
that do not exist is refused in one line."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from consumer import cli
from store import Store
from store.hosting import Hosting
from tests.consumer.test_pinning import Conversation, _booking, _put, _router


async def _cli(argv: list[str]) -> int:
    return await asyncio.to_thread(cli.main, argv)


async def test_mapped_runs_move_and_unmapped_ones_stay_pinned(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Four conversations asking at booking/what and two on the call-back timer under
    version 1; version 2 renames what to when and drops the call-back; activated with the map
    booking/what -> booking/when: the asking ones answer on version 2 (run-migrated), the
    timer ones stay on version 1; bad maps are refused and change nothing."""
    monkeypatch.setenv("DATABASE_URL", database_url)
    hosting = Hosting(store.engine)
    agent_id = f"mig-{uuid.uuid4().hex[:6]}"
    await _put(hosting, _booking(agent_id, "v1", "what"))
    router = _router(hosting)
    asking = [Conversation(router, agent_id) for _ in range(4)]
    timers = [Conversation(router, agent_id) for _ in range(2)]
    for conversation in asking:
        await conversation.say("I want to book")
    for conversation in timers:
        await conversation.say("please call me")
    await hosting.put_version(agent_id=agent_id, workspace="pin-ws",
                              document=_booking(agent_id, "v2", "when", timer=False),
                              digest=f"v2-{agent_id}")

    def write(mapping: object) -> str:
        path = tmp_path / f"{uuid.uuid4().hex}.json"
        path.write_text(json.dumps(mapping))
        return str(path)

    for bad, why in (({"booking/wat": "booking/when"}, "earlier version"),
                     ({"booking/what": "booking/whenn"}, "of version 2"),
                     (["booking/what"], "JSON object")):
        assert await _cli(["agents", "activate", agent_id, "2", "--migrate", write(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err, err
    assert (await hosting.live([agent_id]))[agent_id].live_version == 1

    good = write({"booking/what": "booking/when"})
    assert await _cli(["agents", "activate", agent_id, "2", "--migrate", good]) == 0
    capsys.readouterr()
    for i, conversation in enumerate(asking):
        day = ["monday", "tuesday", "friday", "monday"][i]
        result = await conversation.turn({"message": day})
        assert [m.text for m in result.messages][-1] == f"v2: booked {day}"
        assert conversation.versions[-1] == 2
        assert "run-migrated" in [o.code for o in result.outcomes]
    for conversation in timers:  # call-back/later is not mapped: still version 1
        await conversation.say("anything?")
        assert conversation.versions[-1] == 1
    # Activating again without a map clears it: nothing more moves.
    await hosting.activate(agent_id, 2)
    assert (await hosting.live([agent_id]))[agent_id].migrate_map is None
