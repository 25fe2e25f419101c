"""``replay.registry.RegistryAgents`` on conversations whose turns name no registry version:
those turns are the fallback agent's, or the conversation is skipped saying which turn."""

from __future__ import annotations

from typing import Any

import pytest

from engine.packs import PackSet
from replay import record_conversation
from replay.registry import RegistryAgents
from replay.session import replay_many
from tests.replay.support import demo, script


class _NoRegistry:
    """A registry nobody may ask: these turns name no version, so none is looked up."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the registry was asked ({name})")


async def test_turns_without_a_registry_version_need_the_fallback_agent() -> None:
    conversations = [await record_conversation(demo(), f"s-{n}", script(n)) for n in range(3)]
    assert all(t.agent_version is None for c in conversations for t in c.turns)

    alone = RegistryAgents(_NoRegistry(), PackSet())  # type: ignore[arg-type]
    skipped = await replay_many(alone, conversations)
    assert skipped.count("skipped") == 3 and skipped.replayed == 0
    assert all(r.skipped and r.skipped.startswith("turn 1 was answered by")
               and "no registry version" in r.skipped for r in skipped.reports)

    fallback = RegistryAgents(_NoRegistry(), PackSet(), fallback=demo())  # type: ignore[arg-type]
    same = await replay_many(fallback, conversations)
    assert same.counts()["identical"] == 3


def test_a_version_is_one_or_more() -> None:
    with pytest.raises(ValueError, match="1 or more"):
        RegistryAgents(_NoRegistry(), PackSet(), version=0)  # type: ignore[arg-type]
