"""When the model fails or is slow, the customer is still answered, and the silence clock
starts when the reply goes out: the idle speaker's failures, the host's fallback turn, and
``last_assistant_at`` taken when the reply is final, each across many conversations at once."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import pytest

from engine import (
    Agent,
    FakeClock,
    MockProvider,
    ModelRequest,
    ModelResponse,
    ProviderError,
    TurnRequestError,
    UnusableReply,
)
from engine.clock import to_utc
from engine.recording import recorded_agent, taping
from replay.conversations import Conversation, RecordedTurn
from replay.runner import as_recorded, replay_conversation
from tests.scenarios.support import START

SILENCE_MS = 60_000
NUDGE = {
    "id": "nudge", "on": [{"silence": SILENCE_MS}], "steps": [{"id": "n", "say": "Still there?"}],
}
SIGNUP = {
    "id": "signup",
    "on": [{"message": []}],
    "steps": [{"id": "name", "collect": ["name"]}, {"id": "bye", "say": "Thanks, {{name}}."}],
}
FALLBACK = "Sorry, I cannot answer right now."
HOST_FALLBACK = {"reason": "model-unavailable", "message": "The host's own apology."}


def _session_of(request: ModelRequest) -> str:
    said = " ".join(m.text for m in request.messages)
    found = re.search(r"\bfrom (s\d+)\b", said)
    assert found, said
    return found.group(1)


class SlowModel:
    """Each call takes ``seconds`` of the agent's clock; per conversation, the clock's reading
    when its reply came back is kept (nothing else runs between that and the turn's Settle)."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds
        self.replied_at: dict[str, Any] = {}

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)  # every conversation's call is in the air together
        self.clock.advance(self.seconds)
        self.replied_at[_session_of(request)] = self.clock.now()
        return ModelResponse(json={"message": "What is your name?", "name": None})


async def test_a_turn_slower_than_the_silence_is_not_followed_at_once_by_the_silence_flow() -> None:
    """lastAssistantAt is the agent's clock when the reply is final: 30 conversations whose
    speak calls each take 90 s (longer than the 60 s silence) get their silence wake 60 s after
    their own reply, keyed by their own session and reply time, never in the past."""
    clock = FakeClock(START)
    model = SlowModel(clock, 90)
    agent = Agent(name="Ana", provider=model, clock=clock, fields={"name": {"type": "string"}},
                  flows=[SIGNUP, NUDGE])
    ids = [f"s{i}" for i in range(30)]
    results = await asyncio.gather(*(
        agent.turn({"session_id": sid, "message": f"hi from {sid}", "id": "m1"}) for sid in ids
    ))
    for sid, result in zip(ids, results, strict=True):
        replied = model.replied_at[sid]
        assert replied >= to_utc(START) + timedelta(seconds=90)
        assert result.session.id == sid
        assert result.session.last_assistant_at == replied
        (wake,) = result.schedule
        assert wake.at == replied + timedelta(milliseconds=SILENCE_MS)
        assert wake.key == f"silence@{sid}:nudge:{int(replied.timestamp() * 1000)}"
        assert wake.at > replied  # the nudge waits a whole silence after the reply
    assert len({r.session.last_assistant_at for r in results}) == len(ids)


async def test_the_reply_time_is_recorded_and_a_replay_reads_it_back() -> None:
    """A recording agent keeps the reply's time with the turn, so a replay on the recorded
    clock gives the same lastAssistantAt and the same silence wake."""
    clock = FakeClock(START)
    model = SlowModel(clock, 90)
    agent = Agent(name="Ana", provider=model, clock=clock, fields={"name": {"type": "string"}},
                  flows=[SIGNUP, NUDGE])
    request = {"session_id": "s1", "message": "hi from s1", "id": "m1"}
    with taping("envelopes") as tape:
        result = await recorded_agent(agent).turn(request)
    kept = tape.to_json()
    assert kept is not None and _iso(tape.at) == START
    assert kept["spoke_at"] == "2026-01-05T09:01:30Z" == _iso(result.session.last_assistant_at)
    turn = RecordedTurn(version=1, input=request, at=START, logged_at=START, calls=kept["calls"],
                        recorded=as_recorded(result, None), spoke_at=tape.spoke_at)
    report = await replay_conversation(agent, Conversation(session_id="s1", turns=[turn]))
    assert report.departure is None and report.replayed == 1
    # Without the recorded time the replay departs: the wake would move to START + silence.
    bare = RecordedTurn(version=1, input=request, at=START, logged_at=START, calls=kept["calls"],
                        recorded=as_recorded(result, None))
    departed = await replay_conversation(agent, Conversation(session_id="s1", turns=[bare]))
    assert departed.departure is not None


def _iso(value: Any) -> str:
    return str(value.isoformat().replace("+00:00", "Z"))


def _idle_agent(script: list[Any], **extra: Any) -> Agent:
    return Agent(name="Ana", provider=MockProvider(script), clock=FakeClock(START), **extra)


@pytest.mark.parametrize("failure", [
    UnusableReply("openai: unusable reply: not JSON"),
    {"message": None},
    ProviderError("upstream 503", kind="retryable"),
])
async def test_a_failed_idle_reply_is_retried_by_the_host(failure: Any) -> None:
    """An unusable idle reply (or an outage) is raised for the host to retry the message,
    unusable ones as ``UnusableReply``: nothing of the turn is kept, and the retry answers."""
    agent = _idle_agent([failure, {"message": "Hello! How can I help?"}])
    request = {"session_id": "s1", "message": "hello", "id": "m1"}
    with pytest.raises(ProviderError) as caught:
        await agent.turn(request)
    assert caught.value.kind == "retryable"
    assert isinstance(caught.value, UnusableReply) == (not isinstance(failure, ProviderError)
                                                       or isinstance(failure, UnusableReply))
    retried = await agent.turn(request)
    assert [m.text for m in retried.messages] == ["Hello! How can I help?"]


async def test_a_failed_idle_reply_sends_the_agents_fallback_message() -> None:
    """With a ``fallback_message`` the failed idle reply is answered with it at once, in each
    of many conversations, and counted as a fallback turn; good replies next to them are not."""
    script: list[Any] = []
    for i in range(20):
        script.append({"message": None} if i % 2 else {"message": f"Hello s{i}"})
    agent = _idle_agent(script, lifecycle={"fallback_message": FALLBACK})
    results = []
    for i in range(20):  # the mock's script is in call order
        results.append(await agent.turn({"session_id": f"s{i}", "message": "hi", "id": "m1"}))
    for i, result in enumerate(results):
        assert result.session.id == f"s{i}"
        if i % 2:
            assert [m.text for m in result.messages] == [FALLBACK]
            assert result.turn_outcome == "fallback"
            assert all(f"s{i}" in m.key for m in result.messages)
        else:
            assert [m.text for m in result.messages] == [f"Hello s{i}"]
            assert result.turn_outcome == "answered"


async def test_a_fallback_turn_answers_without_the_model_and_moves_nothing() -> None:
    """The host's fallback turn: no model call (the mock has no script), the message's id
    taken (the same record again is a duplicate), the asking run left asking, the fallback
    message sent (the agent's own when it has one) and the silence clock started."""
    clock = FakeClock(START)
    agent = Agent(name="Ana", provider=MockProvider([{"message": "What is your name?"}]),
                  clock=clock, fields={"name": {"type": "string"}}, flows=[SIGNUP, NUDGE])
    first = await agent.turn({"session_id": "s1", "message": "hi", "id": "m1"})
    stored = first.session.model_dump(mode="json")
    clock.advance(120)
    request = {"session_id": "s1", "message": "my name is Sam", "id": "m2", "session": stored,
               "fallback": HOST_FALLBACK}
    result = await agent.turn(request)
    assert result.llm_calls == 0
    assert [m.text for m in result.messages] == [HOST_FALLBACK["message"]]
    assert [o.code for o in result.outcomes] == ["fallback"]
    assert result.outcomes[0].detail == "model-unavailable"
    (run,) = result.session.runs
    assert (run.status, run.step_id) == ("asking", "name") and "name" not in result.session.data
    assert result.session.inputs[-1] == "m2"
    assert result.session.last_user_at == clock.now() == result.session.last_assistant_at
    (wake,) = result.schedule
    assert wake.at == clock.now() + timedelta(milliseconds=SILENCE_MS)
    again = await agent.turn({**request, "session": result.session.model_dump(mode="json")})
    assert again.messages == [] and [o.code for o in again.outcomes] == ["duplicate-input"]

    own = Agent(name="Ana", provider=MockProvider([]), clock=clock,
                lifecycle={"fallback_message": FALLBACK})
    mine = await own.turn({"session_id": "s2", "message": "hi", "id": "m1",
                           "fallback": HOST_FALLBACK})
    assert [m.text for m in mine.messages] == [FALLBACK] and mine.turn_outcome == "fallback"
    quiet = await own.turn({"session_id": "s3", "message": "hi", "id": "m1",
                            "fallback": HOST_FALLBACK, "silenced": {"reason": "human"}})
    assert quiet.messages == [] and [o.code for o in quiet.outcomes] == ["fallback"]


async def test_a_fallback_answers_only_a_message() -> None:
    """A fallback on a wake, an event or a start is an invalid request, not a silent turn."""
    agent = Agent(name="Ana", provider=MockProvider([]), clock=FakeClock(START))
    others = ({"wake": "w"}, {"event": "paid", "key": "k"}, {"start": {"flow": "f", "key": "k"}})
    for given in others:
        with pytest.raises(TurnRequestError):
            await agent.turn({"session_id": "s1", **given, "fallback": HOST_FALLBACK})


class TickingClock(FakeClock):
    """Moves a minute each time it is read, as a slow turn's wall clock would."""

    def now(self) -> Any:
        value = super().now()
        self.advance(60)
        return value


async def test_a_turn_without_a_model_call_keeps_its_own_time() -> None:
    """A turn that made no model call keeps the turn's time as lastAssistantAt (the clock is
    read once), so it replays exactly without a recording; one that called the model reads
    the clock again."""
    clock = TickingClock(START)
    hello = {"id": "hello", "on": [{"message": []}], "steps": [{"id": "s", "say": "Hi"}]}
    quick = Agent(name="Ana", provider=MockProvider([]), clock=clock, flows=[hello, NUDGE])
    result = await quick.turn({"session_id": "s1", "message": "hi", "id": "m1"})
    assert result.session.last_assistant_at == to_utc(START) and result.llm_calls == 0
    talk = Agent(name="Ana", provider=MockProvider([{"message": "What is your name?"}]),
                 clock=TickingClock(START), fields={"name": {"type": "string"}},
                 flows=[SIGNUP, NUDGE])
    spoke = await talk.turn({"session_id": "s2", "message": "hi", "id": "m1"})
    assert spoke.session.last_assistant_at == to_utc(START) + timedelta(minutes=1)
