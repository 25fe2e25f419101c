"""The history's chat messages are built once per turn and shared by its model calls.

A model turn reads the history twice (the understand call and the speak call). Building the
messages once is only right while what they come from is the same: the same request and the
same history entries. These tests hold both halves: the calls of one turn get equal message
lists, sharing the (frozen) messages, and a change of the history between the two calls is
seen by the second."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from engine import Agent, FakeClock, MockProvider, ModelRequest, ModelResponse
from engine.history import history_messages
from engine.phases import load
from engine.request import HistoryEntry, TurnRequest

FLOWS = [
    {
        "id": "cadastro",
        "on": [{"message": ["quero me cadastrar"]}],
        "steps": [{"id": "dados", "prompt": "Colete os dados."}],
    },
    {
        "id": "suporte",
        "on": [{"message": ["tenho um problema"]}],
        "steps": [{"id": "ajuda", "prompt": "Ajude."}],
    },
]


def history(count: int, *, start: int = 0, who: str = "") -> list[dict[str, Any]]:
    base = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
    return [
        {
            "role": ("user", "assistant")[i % 2],
            "text": f"{who}entrada {i}",
            "at": base + timedelta(seconds=30 * i),
        }
        for i in range(start, start + count)
    ]


def agent(provider: MockProvider) -> Agent:
    return Agent(
        name="Ana", provider=provider, clock=FakeClock("2026-01-05T09:00:00Z"), flows=FLOWS
    )


async def test_both_calls_of_a_turn_get_the_history_and_share_its_messages() -> None:
    provider = MockProvider(
        [
            ModelResponse(json={"flows": {"cadastro": 90, "suporte": 0}}),
            ModelResponse(json={"message": "Claro!"}),
        ]
    )
    result = await agent(provider).turn(
        {"session_id": "s1", "message": "quero me cadastrar", "id": "m1", "history": history(50)}
    )
    assert result.llm_calls == 2
    understand, speak = provider.calls
    assert (understand.schema_name, speak.schema_name) == ("understand", "speak")
    expected = [(e["role"], e["text"]) for e in history(50)] + [("user", "quero me cadastrar")]
    for call in (understand, speak):
        assert [(m.role, m.text) for m in call.messages] == expected
    # The same message objects, in new lists: neither call's list is the other's.
    assert understand.messages is not speak.messages
    assert all(a is b for a, b in zip(understand.messages, speak.messages, strict=True))


async def _state(entries: list[dict[str, Any]]) -> Any:
    provider = MockProvider([])
    request = TurnRequest.parse(
        {"session_id": "s1", "message": "oi", "id": "m1", "history": entries}
    )
    return await load.run(agent(provider).config, request)


async def test_a_new_history_between_calls_is_read_again() -> None:
    """Compaction puts new entries in ``state.history`` between calls: the next call sees them,
    whether the list was replaced or edited in place."""
    state = await _state(history(4))
    first = history_messages(state)
    assert [m.text for m in first] == ["entrada 0", "entrada 1", "entrada 2", "entrada 3", "oi"]

    state.history = [HistoryEntry(role="assistant", text="RESUMO"), *state.history[2:]]
    replaced = history_messages(state)
    assert [m.text for m in replaced] == ["RESUMO", "entrada 2", "entrada 3", "oi"]

    state.history[0] = HistoryEntry(role="assistant", text="OUTRO RESUMO")
    edited = history_messages(state)
    assert [m.text for m in edited] == ["OUTRO RESUMO", "entrada 2", "entrada 3", "oi"]

    again = history_messages(state)
    assert again == edited and again is not edited
    assert all(a is b for a, b in zip(again, edited, strict=True))


async def test_another_request_on_the_same_state_is_read_again() -> None:
    """Load may replace the request (an input dated in the future is read as now); the
    messages follow the request the state holds."""
    state = await _state(history(2))
    assert [m.text for m in history_messages(state)] == ["entrada 0", "entrada 1", "oi"]
    state.request = state.request.model_copy(update={"message": "outra"})
    assert [m.text for m in history_messages(state)] == ["entrada 0", "entrada 1", "outra"]


class Interleaving:
    """Answers every call after yielding to the loop, so concurrent turns interleave between
    their understand and speak calls; keeps each call's messages."""

    def __init__(self) -> None:
        self.calls: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)
        self.calls.append(request)
        if request.schema_name == "understand":
            return ModelResponse(json={"flows": {"cadastro": 90, "suporte": 0}})
        return ModelResponse(json={"message": "Claro!"})


async def test_many_conversations_at_once_each_send_only_their_own_history() -> None:
    """Forty conversations on the same agent, turns running at once: every call's messages are
    its own conversation's history and message, nothing of another's."""
    provider = Interleaving()
    shared = agent(provider)  # type: ignore[arg-type]
    sizes = {f"c{n:02d}": 10 + n % 7 for n in range(40)}

    async def turn(sid: str) -> None:
        result = await shared.turn({
            "session_id": sid, "message": f"{sid}: quero me cadastrar", "id": f"{sid}-m1",
            "history": history(sizes[sid], who=f"{sid}: "),
        })
        assert result.llm_calls == 2, sid

    await asyncio.gather(*(turn(sid) for sid in sizes))
    assert len(provider.calls) == 2 * len(sizes)
    order = [call.messages[-1].text.split(":")[0] for call in provider.calls]
    # The turns did interleave: some conversation's two calls have others' calls between them.
    assert any(order.index(sid) + 1 != len(order) - order[::-1].index(sid) - 1 for sid in sizes)
    seen: dict[str, int] = {}
    for call in provider.calls:
        owners = {m.text.split(":")[0] for m in call.messages}
        assert len(owners) == 1, owners
        (sid,) = owners
        assert [m.text for m in call.messages] == [
            *(e["text"] for e in history(sizes[sid], who=f"{sid}: ")),
            f"{sid}: quero me cadastrar",
        ]
        seen[sid] = seen.get(sid, 0) + 1
    assert seen == dict.fromkeys(sizes, 2)


async def test_earlier_entries_are_bounded_and_this_turns_message_is_whole() -> None:
    """An earlier entry of 50,000 characters (a pasted document, a reply that ran on) reaches
    the prompt cut to ``MAX_HISTORY_ENTRY_CHARS`` with the count left out said in place; this
    turn's own long message is sent whole, once, whether or not the host logged it already."""
    from engine.history import MAX_HISTORY_ENTRY_CHARS

    long_entry = "d" * 50_000
    at = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
    entries = [{"role": "user", "text": long_entry, "at": at},
               {"role": "assistant", "text": "ok", "at": at + timedelta(seconds=1)}]
    mine = "m" * 9_000
    for logged in (False, True):
        provider = MockProvider([])
        history_now = entries + ([{"role": "user", "text": mine,
                                   "at": at + timedelta(seconds=2)}] if logged else [])
        request = TurnRequest.parse(
            {"session_id": "s1", "message": mine, "id": "m1", "history": history_now}
        )
        state = await load.run(agent(provider).config, request)
        sent = [(m.role, m.text) for m in history_messages(state)]
        assert sent[0] == ("user", "d" * MAX_HISTORY_ENTRY_CHARS
                           + f" [... {50_000 - MAX_HISTORY_ENTRY_CHARS} more characters not shown]")
        assert sent[1:] == [("assistant", "ok"), ("user", mine)]


async def test_entries_a_host_keeps_have_their_messages_built_once_across_turns() -> None:
    """A host that gives the same ``HistoryEntry`` objects to several turns (the consumer keeps
    each conversation's window) gets the same messages as one that gives dicts, every turn,
    each built once: later turns hand out the very message objects of the first. An entry
    cannot be edited, and an entry made from one with another text gets its own message."""
    import pydantic

    from engine.request import HistoryEntry

    dicts = history(6)
    dicts[2]["text"] = "x" * 5_000  # bounded in the prompt
    kept = [HistoryEntry.model_validate(e) for e in dicts]
    runs: list[list[Any]] = []
    for n in range(3):
        provider = MockProvider([ModelResponse(json={"flows": {"cadastro": 90, "suporte": 0}}),
                                 ModelResponse(json={"message": "Claro!"})])
        expected_provider = MockProvider(list(provider.script))
        request = {"session_id": "s1", "message": f"quero me cadastrar {n}", "id": f"m{n}"}
        await agent(provider).turn({**request, "history": list(kept)})
        await agent(expected_provider).turn({**request, "history": [dict(e) for e in dicts]})
        for call, expected in zip(provider.calls, expected_provider.calls, strict=True):
            assert call.messages == expected.messages
        runs.append(provider.calls[0].messages)
    for later in runs[1:]:
        assert all(a is b for a, b in zip(runs[0][:6], later[:6], strict=True))
    assert runs[0][6] is not runs[1][6]  # this turn's own message is not an entry's
    try:
        kept[0].text = "editado"  # type: ignore[misc]
    except pydantic.ValidationError:
        pass
    else:
        raise AssertionError("a history entry could be edited")
    other = kept[1].model_copy(update={"text": "outro texto"})
    state = await load.run(
        agent(MockProvider([])).config,
        TurnRequest.parse({"session_id": "s1", "message": "oi", "history": [kept[1], other]}),
    )
    state.history_kept = True
    assert [m.text for m in history_messages(state)] == ["entrada 1", "outro texto", "oi"]
