"""Conversations finish their work in progress on the agent version it started on: a run asking
or parked on a timer keeps its version across an activation that renames or removes its steps,
new conversations (and a pinned one once its runs end) take the live version, and a pinned
version that was deleted by hand falls to the live one with a counted, logged reason."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from consumer import metrics
from consumer.hosting.pinning import has_work_in_progress, pinned_version
from consumer.hosting.routing import RegistryRouter
from consumer.turns.parser import ParsedInput
from engine.definition import definition_digest
from engine.packs import PackSet
from engine.providers import RuleProvider
from store import Store
from store.hosting import Hosting

DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday"]


def _booking(agent_id: str, tag: str, ask_step: str, *, timer: bool = True) -> dict[str, Any]:
    """A booking flow that asks for a day at ``ask_step``, then says it is booked (``tag``
    names the version in the reply); ``callback`` parks on a 1 hour timer."""
    flows: list[dict[str, Any]] = [
        {"id": "booking", "on": [{"message": ["book"]}],
         "steps": [{"id": ask_step, "collect": ["day"], "prompt": "Ask for the day."},
                   {"id": "done", "say": f"{tag}: booked {{{{day}}}}"}]},
    ]
    if timer:
        flows.append({"id": "callback", "on": [{"message": ["call me"]}],
                      "steps": [{"id": "later", "wait": {"ms": 3_600_000}},
                                {"id": "call", "say": f"{tag}: calling you back"}]})
    return {
        "agent_id": agent_id, "workspace": "pin-ws", "name": "Bot", "lifecycle": {},
        "fields": {"day": {"type": "string", "enum": DAYS, "ask": "Which day?"}},
        "flows": flows,
    }


async def _put(hosting: Hosting, document: dict[str, Any]) -> int:
    result = await hosting.put_version(
        agent_id=document["agent_id"], workspace=document["workspace"], document=document,
        digest=definition_digest(document), activate=True,
    )
    return result.version


class Conversation:
    """One conversation driven through the router as the consumer does: route on the saved
    state, run the turn, save the state with the route's binding."""

    def __init__(self, router: RegistryRouter, agent_id: str) -> None:
        self.router = router
        self.agent_id = agent_id
        self.session_id = f"s-{uuid.uuid4().hex[:8]}"
        self.state: dict[str, Any] | None = None
        self.versions: list[int | None] = []
        self.n = 0

    async def say(self, message: str) -> list[str]:
        result = await self.turn({"message": message})
        return [m.text for m in result.messages]

    async def turn(self, given: dict[str, Any], kind: str = "message") -> Any:
        """One turn of ``given`` (a message or a wake), routed and requested as the
        pipeline does (the route's fallback and run map join the request)."""
        self.n += 1
        request: dict[str, Any] = {"session_id": self.session_id, **given}
        if kind == "message":
            request["id"] = f"m{self.n}"
        parsed = ParsedInput(self.session_id, kind, dict(request), input_id=f"m{self.n}",
                             agent_id=self.agent_id)
        route = await self.router.route(parsed, self.state)
        if route.fallback is not None:
            request["fallback"] = dict(route.fallback)
        if route.migrate_runs:
            request["migrate_runs"] = dict(route.migrate_runs)
        if self.state is not None:
            request["session"] = self.state
        result = await route.agent.turn(request)
        state = result.session.model_dump(mode="json")
        state.setdefault("metadata", {})["agent"] = route.binding
        self.state = state
        self.versions.append(route.version)
        return result


def _router(hosting: Hosting) -> RegistryRouter:
    return RegistryRouter(hosting, PackSet(), provider=RuleProvider(), refresh_s=0,
                          cache_size=4)


async def test_parked_runs_finish_on_their_version_across_a_renaming_activation(
    store: Store,
) -> None:
    """Many conversations asking for a field, and parked on a timer, under version 1 keep
    version 1 after version 2 renames the asking step and removes the timer flow; a new
    conversation, and each old one once its runs ended, answers with version 2."""
    hosting = Hosting(store.engine)
    agent_id = f"pin-{uuid.uuid4().hex[:6]}"
    assert await _put(hosting, _booking(agent_id, "v1", "what")) == 1
    router = _router(hosting)
    asking = [Conversation(router, agent_id) for _ in range(6)]
    parked = [Conversation(router, agent_id) for _ in range(3)]
    for conversation in asking:
        await conversation.say("I want to book")
    for conversation in parked:
        await conversation.say("please call me")
    assert all(has_work_in_progress(c.state) for c in asking + parked)
    assert await _put(hosting, _booking(agent_id, "v2", "when", timer=False)) == 2

    fresh = Conversation(router, agent_id)
    await fresh.say("I want to book")
    assert fresh.versions == [2]
    for i, conversation in enumerate(asking):
        day = DAYS[i % len(DAYS)]
        assert (await conversation.say(day))[-1] == f"v1: booked {day}"
        assert conversation.versions == [1, 1]
        assert not has_work_in_progress(conversation.state)
    for conversation in parked:  # the timer flow exists only in version 1: still pinned
        assert conversation.versions[-1] == 1
        await conversation.say("anything new?")
        assert conversation.versions[-1] == 1 and has_work_in_progress(conversation.state)
    # Their runs ended: the next work of an old conversation starts on the live version.
    assert (await asking[0].say("book again"))[-1] == f"v2: booked {DAYS[0]}"
    assert asking[0].versions[-1] == 2
    assert router.cached_agents == 2


async def test_a_deleted_pinned_version_answers_with_the_fallback_counted_and_logged(
    store: Store, caplog: Any
) -> None:
    """A pinned version removed from the registry by hand cannot run: the customer's answer
    and a parked timer's wake each end their runs ``version-gone`` and get the fallback
    message (never silence), counted as ``pin_lost`` and logged with the reason; the next
    message starts afresh on the live version."""
    hosting = Hosting(store.engine)
    agent_id = f"gone-{uuid.uuid4().hex[:6]}"
    await _put(hosting, _booking(agent_id, "v1", "what"))
    router = _router(hosting)
    answering, timer = Conversation(router, agent_id), Conversation(router, agent_id)
    await answering.say("I want to book")
    await timer.say("please call me")
    await _put(hosting, _booking(agent_id, "v2", "when", timer=False))
    async with store.engine.begin() as connection:
        await connection.execute(
            text("DELETE FROM agent_versions WHERE agent_id = :a AND version = 1"),
            {"a": agent_id},
        )
    router = RegistryRouter(hosting, PackSet(), provider=RuleProvider(), refresh_s=0,
                            fallback_message="Sorry, please try again.")
    answering.router = timer.router = router
    before = metrics.AGENT_VERSION_ROUTES.labels("pin_lost")._value.get()

    result = await answering.turn({"message": "monday"})
    assert [m.text for m in result.messages] == ["Sorry, please try again."]
    codes = [o.code for o in result.outcomes]
    assert "version-gone" in codes and "fallback" in codes
    assert answering.state is not None and answering.state["runs"] == []
    assert answering.state["data"].get("day") is None  # nothing half-done was stored
    wake_key = timer.state["runs"][0]["waiting"]["key"]  # type: ignore[index]
    result = await timer.turn({"wake": wake_key}, kind="wake")
    assert [m.text for m in result.messages] == ["Sorry, please try again."]
    assert "version-gone" in [o.code for o in result.outcomes]
    assert metrics.AGENT_VERSION_ROUTES.labels("pin_lost")._value.get() == before + 2
    assert [getattr(r, "reason", None) for r in caplog.records].count("version-deleted") == 2
    # Runs ended: the next message is an ordinary turn on the live version.
    assert (await answering.say("book friday"))[-1] == "v2: booked friday"
    assert answering.versions[-1] == 2


async def test_a_pinned_version_whose_pack_is_gone_answers_with_the_fallback(
    store: Store,
) -> None:
    """A pinned version naming a pack the deployment no longer installs does not build: the
    turn ends the runs ``version-gone`` with the fallback, counted as ``pin_lost``."""
    hosting = Hosting(store.engine)
    agent_id = f"nopack-{uuid.uuid4().hex[:6]}"
    v1 = _booking(agent_id, "v1", "what") | {"packs": ["extra"]}
    await _put(hosting, v1)
    from engine.packs import Pack

    with_pack = RegistryRouter(hosting, PackSet([Pack(name="extra")]), provider=RuleProvider(),
                               refresh_s=0)
    conversation = Conversation(with_pack, agent_id)
    await conversation.say("I want to book")
    await _put(hosting, _booking(agent_id, "v2", "when"))
    conversation.router = _router(hosting)  # a deployment without the pack
    before = metrics.AGENT_VERSION_ROUTES.labels("pin_lost")._value.get()
    result = await conversation.turn({"message": "monday"})
    assert result.messages and "version-gone" in [o.code for o in result.outcomes]
    assert conversation.versions[-1] == 2
    assert metrics.AGENT_VERSION_ROUTES.labels("pin_lost")._value.get() == before + 1


@given(
    binding=st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.from_type(object)
                                                 .filter(lambda v: not callable(v)),
                                                 max_size=4)),
    runs=st.one_of(st.none(), st.integers(), st.lists(st.just({"id": "r"}), max_size=3)),
    agent_id=st.text(max_size=8),
)
def test_any_binding_and_state_give_a_pin_or_none(binding: Any, runs: Any, agent_id: str) -> None:
    """Whatever a stored binding and runs hold, the pin is a version >= 1 of the same agent
    with work in progress, or None; it never raises."""
    state = {"runs": runs, "metadata": {"agent": binding}}
    pin = pinned_version(binding, state, agent_id)
    if pin is not None:
        assert isinstance(binding, dict) and binding["agent_id"] == agent_id
        assert pin == binding["version"] >= 1 and has_work_in_progress(state)


STEP_NAMES = ["what", "when", "ask", "day_q", "collect"]


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    old_step=st.sampled_from(STEP_NAMES),
    new_step=st.sampled_from(STEP_NAMES),
    new_has_timer=st.booleans(),
    reorder=st.booleans(),
    delete_old=st.booleans(),
)
def test_no_parked_run_is_lost_under_any_version_pair(
    database_url: str, old_step: str, new_step: str, new_has_timer: bool, reorder: bool,
    delete_old: bool,
) -> None:
    """For random pairs of versions (the asking step renamed or not, the timer flow kept or
    removed, flows reordered) and the old version kept or deleted by hand: a conversation
    asking and one parked on a timer under the old version each get a reply to their next
    input, and no run ends ``step-gone`` or ``flow-gone``."""

    async def play(store: Store) -> None:
        hosting = Hosting(store.engine)
        agent_id = f"prop-{uuid.uuid4().hex[:8]}"
        await _put(hosting, _booking(agent_id, "v1", old_step))
        router = _router(hosting)
        answering, timer = Conversation(router, agent_id), Conversation(router, agent_id)
        await answering.say("I want to book")
        await timer.say("please call me")
        new = _booking(agent_id, "v2", new_step, timer=new_has_timer)
        if reorder:
            new["flows"].reverse()
        await _put(hosting, new)
        if delete_old:
            async with store.engine.begin() as connection:
                await connection.execute(
                    text("DELETE FROM agent_versions WHERE agent_id = :a AND version = 1"),
                    {"a": agent_id},
                )
        fresh = _router(hosting)
        answering.router = timer.router = fresh
        answered = await answering.turn({"message": "tuesday"})
        assert timer.state is not None
        woken = await timer.turn({"wake": timer.state["runs"][0]["waiting"]["key"]},
                                 kind="wake")
        for result in (answered, woken):
            codes = {o.code for o in result.outcomes}
            assert result.messages, codes
            assert not codes & {"step-gone", "flow-gone"}, codes
        if not delete_old:
            assert [m.text for m in answered.messages][-1] == "v1: booked tuesday"
            assert [m.text for m in woken.messages] == ["v1: calling you back"]

    async def main() -> None:
        store = await Store.connect(database_url, pool_size=2, max_overflow=0)
        try:
            await play(store)
        finally:
            await store.close()

    asyncio.run(main())
