"""A database filled by the real consumer with the demo agent, for the inspector's tests.

``fill`` runs a ``ConsumerService`` (the same class ``turnflow consume`` runs) on one test's
topics with the demo agent (offline rule provider, plus a keyword hand-off so an incident list
has hand-offs in it) and produces the scripted conversations of ``SCRIPTS``, many at once,
interleaved: bookings, a corrected day, opening hours, hand-offs, a message holding HTML and
script, and an undecodable record keyed by a session (dead-lettered). The scheduler is not run,
so the timers the turns set stay pending, as the inspector must show them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine import Agent, ModelRequest, ModelResponse, ProviderError
from engine.providers.rules import RuleProvider
from examples import demo_agent
from examples.demo_agent import build_agent
from tests.integration.harness import ServiceSetup, running_consumer

HANDOFF = {
    "handoff": {
        "keywords": ["person", "human"],
        "tag": "front-desk",
        "message": "I'll get a person from the shop to help you.",
    }
}

REFUSED = "xyzzy"
"""A word the provider refuses any message holding (a fatal model error)."""

PHONE = "+351 912 000 111"
"""The phone number the ``phone`` conversations give instead of a name."""

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="document.title=1">&amp;'

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "booked": [
        {"message": "hi"},
        {"message": "my name is Sam"},
        {"message": "I need the brakes fixed on saturday"},
        {"message": "yes"},
        {"event": "paid", "payload": {"amount": 45}},
    ],
    "wrong-day": [
        {"message": "book a repair"},
        {"message": "a tune-up on friday"},
        {"message": "actually, saturday"},
        {"message": "yes"},
    ],
    "hours": [{"message": "what are your opening hours?"}],
    "handoff": [
        {"message": "hi"},
        {"message": "can I talk to the person who fixed my bike last week?"},
        {"message": "hello?"},
    ],
    "hostile": [{"message": HOSTILE}],
    # The customer answers the name question with a phone number: the agent asks the name a
    # second time (an operator finds this conversation by the number alone).
    "phone": [{"message": "hi"}, {"message": f"you can reach me on {PHONE}"},
              {"message": "my name is Maria"}],
    # The model provider refuses the second message for good (``RefusingProvider``): that
    # input goes to the DLQ and is recorded as the conversation's dead-lettered source; the
    # messages around it are answered.
    "refused": [{"message": "hi"}, {"message": f"{REFUSED} please"}, {"message": "hello"}],
    # Refused on the very first message: a conversation with no turn and no session row,
    # only its dead-lettered input (the customer was never answered at all).
    "lost": [{"message": f"hello? {REFUSED}"}],
}
"""What each kind of conversation sends, in order (a message's id is ``m<position>`` unless
the script gives one)."""

BAD_AT = {
    "message": "I never got an answer, call me on +351 912 345 678",
    "id": "m-bad-at",
    "at": "yesterday at noon",
}
"""A message a broken adapter sent with an ``at`` that is no time: the parser refuses it, and
it is dead-lettered under the session it names (``<prefix>bad-at``) with its words."""

SAVED_TURNS = {kind: sum(1 for r in script if REFUSED not in str(r.get("message", "")))
               for kind, script in SCRIPTS.items()}


class RefusingProvider:
    """The offline rule provider, except that a message holding ``REFUSED`` is refused for
    good (``ProviderError`` of kind fatal, as a provider's 400 would be)."""

    def __init__(self) -> None:
        self._inner = RuleProvider()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if REFUSED in str(request.meta.get("message") or ""):
            raise ProviderError("refused by the test provider", kind="fatal", status=400)
        return await self._inner.generate(request)


def agent() -> Any:
    """The demo agent on the offline provider, with the keyword hand-off on top."""
    demo = build_agent(provider=RefusingProvider())
    config = demo.config
    return Agent(
        name=config.name, persona=config.persona, goal=config.goal,
        knowledge=list(config.knowledge), provider=config.provider,
        fields=demo_agent.FIELDS, flows=demo_agent.FLOWS,
        actions={name: action.handler for name, action in config.actions.items()},
        events=dict(config.events), lifecycle=HANDOFF,
    )


def session_ids(kind: str, count: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{kind}-{n:03d}" for n in range(count)]


async def fill(
    setup: ServiceSetup, *, per_script: int = 4, prefix: str = ""
) -> dict[str, list[str]]:
    """Run the consumer until every scripted input of ``per_script`` conversations of each
    script is saved or dead-lettered (and one undecodable record sent to the DLQ); returns the
    session ids by script. Inputs of different conversations are interleaved, as traffic is."""
    sessions = {kind: session_ids(kind, per_script, prefix) for kind in SCRIPTS}
    records: list[dict[str, Any] | bytes] = []
    longest = max(len(s) for s in SCRIPTS.values())
    for position in range(longest):
        for kind, script in SCRIPTS.items():
            if position >= len(script):
                continue
            for sid in sessions[kind]:
                record = {"session_id": sid, **script[position]}
                if "message" in record:
                    record.setdefault("id", f"m{position}")
                else:
                    record["key"] = f"e{position}"
                records.append(record)
    expected = {sid: SAVED_TURNS[kind] for kind in SCRIPTS for sid in sessions[kind]}
    settings = setup.settings(merge_bursts=False)
    async with running_consumer(settings, agent()):
        # One conversation at a time per position, so each input is its own turn.
        await setup.produce(records)
        await setup.produce([b"\xff not json"], key=f"{prefix}broken".encode())
        await setup.produce([{"session_id": f"{prefix}bad-at", **BAD_AT}])
        await _until_saved(setup.database_url, expected,
                           sessions["refused"] + sessions["lost"] + [f"{prefix}bad-at"])
    return sessions


async def _until_saved(
    url: str, expected: dict[str, int], dead_lettered: list[str], within: float = 90.0
) -> None:
    import asyncpg

    from store.urls import plain_url

    connection = await asyncpg.connect(plain_url(url))
    try:
        async with asyncio.timeout(within):
            while True:
                rows = await connection.fetch(
                    "SELECT id, version FROM sessions WHERE id = ANY($1::text[])", list(expected)
                )
                versions = {r["id"]: r["version"] for r in rows}
                dead = await connection.fetchval(
                    "SELECT count(DISTINCT session_id) FROM dead_lettered_sources "
                    "WHERE session_id = ANY($1::text[])", dead_lettered,
                )
                if dead == len(dead_lettered) and all(
                    versions.get(s, 0) >= n for s, n in expected.items()
                ):
                    return
                await asyncio.sleep(0.2)
    finally:
        await connection.close()


async def long_conversation(setup: ServiceSetup, session_id: str, turns: int) -> None:
    """Run ``turns`` messages of one conversation through the consumer (the demo agent),
    until all are saved: a conversation long enough to be read a page at a time."""
    records: list[dict[str, Any] | bytes] = [
        {"session_id": session_id, "message": f"message {n}", "id": f"l{n}"}
        for n in range(1, turns + 1)
    ]
    async with running_consumer(setup.settings(merge_bursts=False), agent()):
        await setup.produce(records)
        await _until_saved(setup.database_url, {session_id: turns}, [], within=300.0)
