"""Running a conversation's inputs again, in order, on the recorded clock, against an agent.

The replay does what the service did for each turn, with the engine only: the session state
the previous replayed turn left, the history the service would have loaded (user entries from
message inputs, assistant entries from the replayed messages, at the logged times, the last
``history_limit`` of them), the clock set to the time the turn ran at, and a provider that
stands in for the model (``TapeProvider`` serves the recorded replies; ``--model live`` asks a
real one).

A departing turn does not end the comparison by itself. When the state the departing turn left
is the state the recording left (the digest recorded with each turn, ``state``), the next turn
starts from the same place and its comparison still means something: the replay goes on and
reports every later departure too, so an accepted wording change at turn 1 cannot hide a
behaviour change at turn 3. When the state differs, or was not recorded, what follows would
differ for that reason alone: the replay stops there and the conversation is *undecidable past*
that turn (``ConversationReport.undecidable_after``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from engine import Agent, FakeClock, ModelRequest, ModelResponse
from engine.recording import fields_written, state_digest
from replay.compare import Difference, compare
from replay.conversations import Conversation, Recorded, RecordedTurn, iso
from replay.tape_provider import TapeProvider

__all__ = [
    "ConversationReport",
    "Departure",
    "ReplayProvider",
    "TurnAgent",
    "TurnReplay",
    "replay_conversation",
]

TurnAgent = Callable[[RecordedTurn], Agent]
"""Which agent replays a turn, when that is not one agent for the whole conversation (a
conversation served from the registry: each turn's recorded agent and version)."""

HISTORY_LIMIT = 50
"""The service's default ``HISTORY_LIMIT``: transcript entries loaded with each turn."""


class ReplayProvider(Protocol):
    """A stand-in for the model that is told each turn's recorded calls before it runs."""

    def load(self, calls: list[dict[str, Any]] | None) -> None: ...

    async def generate(self, request: ModelRequest) -> ModelResponse: ...


@dataclass(frozen=True)
class Departure:
    """A turn whose replayed result differs from the recorded one."""

    turn: int  # 1-based position in the conversation
    version: int
    kind: str
    at: str
    differences: list[Difference]
    unrecorded: int = 0  # model calls of this turn that had no recorded reply

    @property
    def aspects(self) -> list[str]:
        return [d.aspect for d in self.differences]


@dataclass
class TurnReplay:
    """One replayed turn: the recorded and the replayed result (None when the turn raised)."""

    turn: RecordedTurn
    replayed: Recorded | None
    result: Any = None


@dataclass
class ConversationReport:
    """How one conversation replayed: every departing turn, in order, and where the comparison
    had to stop (``undecidable_after``: the departing turn after which the state differed, or
    was not recorded, so later turns could not be compared)."""

    session_id: str
    turns: int
    replayed: int = 0
    departures: list[Departure] = field(default_factory=list)
    undecidable_after: int | None = None
    undecidable_reason: str = ""
    unrecorded: int = 0
    skipped: str | None = None  # why it was not replayed at all
    # What replayed it, when each turn's agent came from the registry: ``agent_id vN``.
    agents: list[str] = field(default_factory=list)
    turn_replays: list[TurnReplay] = field(default_factory=list)

    @property
    def departure(self) -> Departure | None:
        """The first departing turn, if any."""
        return self.departures[0] if self.departures else None

    @property
    def status(self) -> str:
        if self.skipped is not None:
            return "skipped"
        return "changed" if self.departures else "identical"


def _history_entries(turn: RecordedTurn, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript entries the service derives from one saved turn: a burst turn gives one
    customer entry per message, its earlier ones first."""
    entries: list[dict[str, Any]] = []
    text = turn.input.get("message")
    if isinstance(text, str):
        burst = turn.input.get("burst")
        for part in burst if isinstance(burst, list) else []:
            if isinstance(part, dict) and isinstance(part.get("message"), str):
                entries.append({"role": "user", "text": part["message"],
                                "at": part.get("at") or turn.logged_at})
        entries.append({"role": "user", "text": text, "at": turn.input.get("at") or turn.logged_at})
    entries += [{"role": "assistant", "text": m.get("text") or "", "at": turn.logged_at}
                for m in messages]
    return entries


_RECORDED_FIELDS = {"messages", "schedule", "outcomes", "started", "ended", "skipped", "llm_calls"}


def as_recorded(result: Any, fields: dict[str, Any] | None, state: str | None = None
                ) -> Recorded:
    """A ``TurnResult`` in the turn log's JSON form (its session is not dumped: the turn log
    keeps it apart, and the caller has the session's JSON form already)."""
    dumped = result.model_dump(mode="json", include=_RECORDED_FIELDS)
    return Recorded(
        messages=dumped["messages"],
        schedule=dumped["schedule"],
        outcomes=dumped["outcomes"],
        started=dumped["started"],
        ended=dumped["ended"],
        skipped=dumped["skipped"],
        llm_calls=dumped["llm_calls"],
        fields=fields,
        state=state,
    )


class _TurnClock:
    """The recorded clock of one turn: its time on the first reading, then the time its reply
    was final (``spoke_at``, when recorded) on every later one, as the live clock read."""

    def __init__(self, start: datetime) -> None:
        self._clock = FakeClock(start)
        self._later: datetime | None = None
        self._read = False

    def set(self, at: datetime, *, spoke_at: datetime | None = None) -> None:
        self._clock.set(at)
        self._later, self._read = spoke_at, False

    def now(self) -> datetime:
        if self._read and self._later is not None:
            return self._later
        self._read = True
        return self._clock.now()


async def replay_conversation(
    agent: Agent | TurnAgent,
    conversation: Conversation,
    *,
    provider: ReplayProvider | None = None,
    history_limit: int = HISTORY_LIMIT,
    stop_at_departure: bool = True,
    keep_turns: bool = False,
    on_turn: Callable[[TurnReplay], None] | None = None,
) -> ConversationReport:
    """Replay ``conversation`` against ``agent`` (one agent, or which agent for each turn);
    the report lists where it departs.

    ``stop_at_departure``: stop at a departing turn after which the state differs from the
    recorded one (or was not recorded), marking the conversation undecidable past it; False
    goes on whatever the state (``--model live``, which compares decisions, not results)."""
    report = ConversationReport(session_id=conversation.session_id, turns=len(conversation.turns))
    if not conversation.turns:
        report.skipped = "no turns"
        return report
    if not conversation.complete:
        first = conversation.turns[0].version
        report.skipped = f"the turn log starts at version {first} or has gaps"
        return report
    stand_in = provider if provider is not None else TapeProvider()
    clock = _TurnClock(conversation.turns[0].at)
    # Each agent replaced once: the same provider and clock whichever agent runs a turn.
    replaced: dict[int, Agent] = {}

    def replaying_for(turn: RecordedTurn) -> Agent:
        chosen = agent if isinstance(agent, Agent) else agent(turn)
        found = replaced.get(id(chosen))
        if found is None:
            found = replaced[id(chosen)] = chosen.replaced(provider=stand_in, clock=clock)
        return found

    state: dict[str, Any] | None = None
    history: list[dict[str, Any]] = []
    for position, turn in enumerate(conversation.turns, start=1):
        replaying = replaying_for(turn)
        clock.set(turn.at, spoke_at=turn.spoke_at)
        stand_in.load(turn.calls)
        before_unrecorded = _unrecorded(stand_in)
        request = {
            **turn.input,
            "session_id": conversation.session_id,
            "session": state,
            "history": history[-history_limit:] if history_limit else [],
        }
        error: str | None = None
        replayed: Recorded | None = None
        result: Any = None
        after_state: dict[str, Any] | None = None
        try:
            result = await replaying.turn(request)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        turn_unrecorded = _unrecorded(stand_in) - before_unrecorded
        report.unrecorded += turn_unrecorded
        report.replayed += 1
        if result is not None:
            after_state = result.session.model_dump(mode="json")
            fields = (
                fields_written(state, after_state) if turn.recorded.fields is not None else None
            )
            replayed = as_recorded(result, fields)
            differences = compare(turn.recorded, replayed)
        else:
            differences = [Difference("error", [], [error or "the turn raised"])]
        step = TurnReplay(turn=turn, replayed=replayed, result=result)
        if keep_turns:
            report.turn_replays.append(step)
        if on_turn is not None:
            on_turn(step)
        if differences:
            report.departures.append(Departure(
                turn=position,
                version=turn.version,
                kind=turn.kind,
                at=iso(turn.at),
                differences=differences,
                unrecorded=turn_unrecorded,
            ))
            if stop_at_departure and position < len(conversation.turns):
                reason = _diverged(turn, after_state)
                if reason:
                    report.undecidable_after, report.undecidable_reason = position, reason
                    break
        if after_state is None:
            break  # nothing to carry on from
        state = after_state
        history += _history_entries(turn, [m.model_dump(mode="json") for m in result.messages])
    return report


def _diverged(turn: RecordedTurn, after: dict[str, Any] | None) -> str:
    """Why the turn after a departing one cannot be compared; "" when it can (the replayed
    state is the recorded one)."""
    if after is None:
        return "the replayed turn raised, so there is no state to go on from"
    if turn.recorded.state is None:
        return "the recording keeps no state for this turn to compare"
    if state_digest(after) != turn.recorded.state:
        return "the state this turn left differs from the recorded one"
    return ""


def _unrecorded(provider: Any) -> int:
    counter = getattr(provider, "unrecorded", None)
    return sum(counter.values()) if counter is not None else 0
