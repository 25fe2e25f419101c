"""``TurnState``: the working memory of one turn, passed from phase to phase.

It holds the turn's own copy of the session (the only session the phases write), the result
lines as they accumulate, and the few facts one phase leaves for a later one (who holds the
floor, who speaks, who already answered). It lives for one ``turn()`` call and is never returned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from engine.conditions import ConditionContext, holds
from engine.config import Flow
from engine.envelopes import Judgement, UnderstandPlan
from engine.keys import run_id, run_key, session_key
from engine.records import built, write
from engine.request import HistoryEntry, Message, Outcome, RunChange, ScheduleEntry, Skip
from engine.session import Claim, Run, RunStatus, Session, Waiting, WaitKind

if TYPE_CHECKING:
    from engine.agent_config import AgentConfig
    from engine.providers.base import ChatMessage
    from engine.request import TurnRequest


@dataclass
class PendingSummary:
    """What the summary call must cover: the dropped entries, and where the kept tail starts."""

    dropped: list[HistoryEntry]
    covers: int
    previous: str | None


@dataclass
class Candidates:
    """What code found worth judging, before deciding whether to call."""

    floor: Run | None = None
    eligible: list[tuple[Flow, int]] = field(default_factory=list)  # (flow, trigger index)
    catch_all: tuple[Flow, int] | None = None
    lone: tuple[Flow, int] | None = None
    plan: UnderstandPlan = field(default_factory=UnderstandPlan)
    worth: bool = False


@dataclass
class Speaker:
    """The one talk step (or the idle speaker) that speaks this turn."""

    run_id: str | None
    step_id: str | None
    question: str | None = None


@dataclass
class SpeakReply:
    """What phase 6 got back: a message and field values, or a deferral."""

    text: str | None
    values: dict[str, Any] = field(default_factory=dict)
    patches: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    deferred: str | None = None  # "retryable" | "fatal" when no message came back
    error: str | None = None
    retry_after_s: float | None = None  # the server's hint, when it gave one
    skipped: bool = False
    unusable: bool = False  # the call was answered, but with no usable message


@dataclass
class TurnState:
    """Everything one turn knows while it runs."""

    config: AgentConfig
    request: TurnRequest
    now: datetime
    session: Session
    # The session as it came in (a fresh one when none came), for ``changed``: built only when
    # a turn calls it.
    original: Callable[[], Session]
    history: list[HistoryEntry]
    # The history entries are the host's own objects, shared rather than copied (given as
    # ``HistoryEntry``, frozen): the chat message built from each is kept on it for the host's
    # later turns that give it again (engine.history.history_messages).
    history_kept: bool = False
    ignored: bool = False
    done: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    schedule: list[ScheduleEntry] = field(default_factory=list)
    started: list[RunChange] = field(default_factory=list)
    ended: list[RunChange] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    llm_calls: int = 0
    floor_taken: bool = False
    floor_run_id: str | None = None
    routed_run_id: str | None = None
    judgement: Judgement | None = None
    speaker: Speaker | None = None
    reply: SpeakReply | None = None
    answered_by: list[str] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    steps_taken: dict[str, int] = field(default_factory=dict)
    hops: dict[str, int] = field(default_factory=dict)
    inline_after_ms: dict[str, int] = field(default_factory=dict)
    retry_run_id: str | None = None
    moved_runs: set[str] = field(default_factory=set)
    compaction_pending: PendingSummary | None = None
    candidates: Candidates | None = None
    lifecycle: Any = None  # a LifecycleTurn, only for agents with lifecycle settings
    # The chat messages built from the history for this turn's model calls, with the request
    # and the entries they were built from (engine.history.history_messages).
    history_chat: tuple[TurnRequest, tuple[HistoryEntry, ...], tuple[ChatMessage, ...]] | None = (
        field(default=None, repr=False)
    )
    # Two indexes of session.runs, built together by one scan (_indexed) and kept by new_run
    # and end_run: live()'s runs by id, and the "asking" and "suspended" runs by id(run), which
    # set_status (the only writer of a run's status) also keeps. Both are rebuilt when
    # session.runs is another list or another length than the one they follow.
    _run_index: dict[str, Run] = field(default_factory=dict, repr=False)
    _held: dict[str, dict[int, Run]] = field(default_factory=dict, repr=False)
    _indexed_runs: list[Run] | None = field(default=None, repr=False)
    _indexed_count: int = field(default=-1, repr=False)

    # --- reading ------------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        return self.request.kind

    @property
    def is_message(self) -> bool:
        return self.request.kind == "message"

    def flow(self, flow_id: str) -> Flow | None:
        return self.config.flow_map.get(flow_id)

    def cond_ctx(
        self, run: Run | None = None, input: dict[str, Any] | None = None
    ) -> ConditionContext:
        return ConditionContext(
            data=self.session.data,
            context=self.request.context,
            input=input if input is not None else (run.input if run else {}),
            now=self.now,
            session_id=self.session.id,
        )

    def holds(
        self, condition: Any, run: Run | None = None, input: dict[str, Any] | None = None
    ) -> bool:
        if condition is None:  # holds, as ``conditions.holds`` says, without building a context
            return True
        return holds(condition, self.cond_ctx(run, input), self.config.conditions)

    def asking(self) -> list[Run]:
        """The asking runs, in session order."""
        return self._having("asking")

    def asker(self) -> Run | None:
        askers = self._having("asking")
        return askers[-1] if askers else None

    def suspended(self) -> list[Run]:
        """The suspended runs, in session order."""
        return self._having("suspended")

    def most_recently_suspended(self) -> Run | None:
        suspended = self._having("suspended")
        if not suspended:
            return None
        return max(suspended, key=lambda r: r.suspended_seq or 0)

    def _having(self, status: RunStatus) -> list[Run]:
        """``[r for r in session.runs if r.status == status]`` for "asking" or "suspended".

        Every phase asks for the asker or the suspended stack, some several times, and most
        turns have neither: with the index, a session of parked runs answers without a scan.
        The index may also hold a run that has since left the session (ended, or a list
        replaced), so a non-empty answer is still read off ``session.runs``, in its order.
        """
        runs = self._indexed()
        members = self._held[status]
        if not members:
            return []
        return [r for r in runs if id(r) in members]

    def _indexed(self) -> list[Run]:
        """``session.runs``, with both indexes brought up to date with it first: the phases
        only append a run or assign a new list without one, never replace a run in place, so
        another list or another length is the sign of a change the indexes did not follow."""
        runs = self.session.runs
        if runs is not self._indexed_runs or len(runs) != self._indexed_count:
            # Reversed, so a (hand-made) duplicate id finds its first run, as run() does.
            self._run_index = {run.id: run for run in reversed(runs)}
            held: dict[str, dict[int, Run]] = {"asking": {}, "suspended": {}}
            for run in runs:
                if run.status in held:
                    held[run.status][id(run)] = run
            self._held = held
            self._indexed_runs = runs
            self._indexed_count = len(runs)
        return runs

    def live(self, run_id: str) -> Run | None:
        """``session.run(run_id)`` through the index of the runs by id (see ``_indexed``)."""
        self._indexed()
        return self._run_index.get(run_id)

    # --- writing ------------------------------------------------------------------------------

    def outcome(
        self,
        code: str,
        run: Run | None = None,
        *,
        step_id: str | None = None,
        detail: str | None = None,
        llm_calls: int = 0,
        status: str | None = None,
    ) -> None:
        self.outcomes.append(
            _outcome(
                code,
                run.id if run else None,
                run.flow_id if run else None,
                step_id if step_id is not None else (run.step_id if run else None),
                status if status is not None else (run.status if run else None),
                detail,
                llm_calls,
            )
        )

    def skip(self, flow_id: str, code: str, detail: str | None = None) -> None:
        self.skipped.append(Skip(flow_id=flow_id, code=code, detail=detail))

    def end_run(
        self, run: Run, reason: str, *, code: str | None = None, detail: str | None = None
    ) -> None:
        """Remove ``run`` from the session and log why (``code`` defaults to the reason)."""
        if self.live(run.id) is None:
            return
        runs = self.session.runs
        self.session.runs = [r for r in runs if r.id != run.id]
        if runs is self._indexed_runs:
            # Still the list the indexes follow, so they follow the new one.
            self._run_index.pop(run.id, None)
            for members in self._held.values():
                members.pop(id(run), None)
            self._indexed_runs = self.session.runs
            self._indexed_count += len(self.session.runs) - len(runs)
        self.outcome(code or reason, run, detail=detail, status="ended")
        self.ended.append(_run_change(run.id, run.flow_id, reason))
        if self.floor_run_id == run.id:
            self.floor_run_id = None

    def set_status(self, run: Run, status: RunStatus) -> None:
        """Set ``run.status``: the one place a turn writes it, so the index behind
        ``asking()`` and ``suspended()`` changes with it."""
        old = run.status
        write(run, status=status)
        held = self._held
        if held and old != status:
            key = id(run)
            if old in held:
                held[old].pop(key, None)
            if status in held:
                held[status][key] = run

    def suspend(self, run: Run) -> None:
        self.set_status(run, "suspended")
        run.suspended_seq = self.session.next_seq()

    def claim(self, key: str) -> None:
        claim = self.session.claims.get(key)
        count = claim.count + 1 if claim else 1
        self.session.claims[key] = _claim(self.now, count)

    def new_run(
        self,
        flow: Flow,
        *,
        origin: str,
        trigger: int | None,
        input: dict[str, Any],
        reason: str,
        parent: Run | None = None,
    ) -> Run:
        """Append a running run at the flow's first step, claim the flow, apply clear_on_start."""
        run = _new_run(
            run_id(self.session.id, self.session.next_seq()),
            flow.id,
            flow.steps[0].id,
            dict(input),
            self.now,
            parent.id if parent else None,
            trigger,
            origin,
        )
        self.session.runs.append(run)
        if self.session.runs is self._indexed_runs:
            # A new run is "running": nothing for the status index to hold. A (hand-made)
            # duplicate id keeps finding its first run.
            self._indexed_count += 1
            self._run_index.setdefault(run.id, run)
        self.claim(f"flow:{flow.id}")
        for name in flow.clear_on_start:
            self.session.data.pop(name, None)
            run.asked.pop(name, None)
        self.started.append(_run_change(run.id, flow.id, reason))
        self.outcome("started", run, detail=reason)
        return run

    def schedule_wake(self, key: str, at: datetime, replaces: str | None = None) -> None:
        self.schedule.append(_schedule_entry(key, at, replaces))

    def park(
        self, run: Run, *, key: str, kind: WaitKind, at: datetime, event: str | None = None
    ) -> None:
        """Leave ``run`` waiting under ``key`` and schedule the wake that resumes it at ``at``:
        a parked run always has its wake, whatever parked it (a wait step, a deferred action,
        a delayed trigger, a speak retry)."""
        self.set_status(run, "waiting")
        write(run, waiting=_waiting(key, kind, at, event))
        self.schedule_wake(key, at)

    def send(self, run: Run | None, kind: str, text: str, key: str, step_id: str | None) -> None:
        after = self.inline_after_ms.pop(run.id, 0) if run else 0
        self.messages.append(
            _message(kind, text, key, after, run.id if run else None, step_id)
        )
        self.sent.append(text)

    # --- keys ---------------------------------------------------------------------------------

    @property
    def lineage(self) -> str:
        """The session's lineage: set by its latest burst turn (``engine.keys``), empty before
        any. Kept in ``session.metadata`` so a host that copies a session it cannot read in
        full keeps it."""
        lineage = self.session.metadata.get("lineage")
        return lineage if isinstance(lineage, str) else ""

    def talk_key(self, run: Run) -> str:
        """The idempotency key of a run's current step visit. (A session with no lineage, the
        usual one, takes the short way: this runs for every reply, wait and action.)"""
        if not self.session.metadata.get("lineage"):
            return f"{run.id}:{run.step_id}:{run.visit}"
        return run_key(run.id, self.session.id, f"{run.step_id}:{run.visit}", self.lineage)

    def session_key(self, name: str, local: str) -> str:
        """A key of this conversation not built on a run (``idle``, ``fallback``,
        ``handoff``)."""
        return session_key(name, self.session.id, local, self.lineage)




# --- the records a turn builds ------------------------------------------------------------------
#
# Each turn builds several outcomes, messages, wakes and run changes, and a run per start, from
# values the engine made. These build them as their validated construction does (the same field
# values, the same fields counted as given, defaults filled: see ``engine.records``) without
# validating again; a value of another type than validation would leave (a str subclass, a
# naive or non-UTC time, a non-str key) takes the validated construction, which converts or
# refuses it as before. tests/engine/test_records.py compares both paths.

# Records whose every field is given.
_ALL_GIVEN = {
    model: frozenset(model.model_fields) for model in (ScheduleEntry, Waiting, RunChange)
}
_OUTCOME_GIVEN = frozenset(
    ("code", "run_id", "flow_id", "step_id", "status", "detail", "llm_calls")
)


def _outcome(
    code: str,
    run_id: str | None,
    flow_id: str | None,
    step_id: str | None,
    status: str | None,
    detail: str | None,
    llm_calls: int,
) -> Outcome:
    """``Outcome(code=..., run_id=..., ..., llm_calls=...)``."""
    values = {
        "code": code,
        "run_id": run_id,
        "flow_id": flow_id,
        "step_id": step_id,
        "status": status,
        "detail": detail,
        "llm_calls": llm_calls,
        "credits": None,
    }
    return built(Outcome, values, _OUTCOME_GIVEN, validate=(
        type(code) is not str
        or (detail is not None and type(detail) is not str)
        or (status is not None and type(status) is not str)
        or (step_id is not None and type(step_id) is not str)
        or type(llm_calls) is not int
    ))


_MESSAGE_KINDS = frozenset(("ai", "verbatim", "handoff"))
_MESSAGE_GIVEN = frozenset(("kind", "text", "key", "after_ms", "run_id", "step_id"))


def _message(
    kind: str, text: str, key: str, after_ms: int, run_id: str | None, step_id: str | None
) -> Message:
    """``Message(kind=..., text=..., key=..., after_ms=..., run_id=..., step_id=...)``."""
    values = {
        "kind": kind,
        "text": text,
        "key": key,
        "after_ms": after_ms,
        "run_id": run_id,
        "step_id": step_id,
        "handoff": None,
        "provenance": [],
        "agent_id": None,
    }
    return built(Message, values, _MESSAGE_GIVEN, validate=(
        kind not in _MESSAGE_KINDS
        or type(text) is not str
        or type(key) is not str
        or type(after_ms) is not int
        or (step_id is not None and type(step_id) is not str)
    ))


def _schedule_entry(key: str, at: datetime, replaces: str | None) -> ScheduleEntry:
    """``ScheduleEntry(key=..., at=..., replaces=...)``."""
    values = {"key": key, "at": at, "replaces": replaces}
    return built(ScheduleEntry, values, _ALL_GIVEN[ScheduleEntry],
                 validate=type(key) is not str or type(at) is not datetime)


_WAIT_KINDS = frozenset(("timer", "event", "defer", "retry", "trigger"))


def _waiting(key: str, kind: WaitKind, at: datetime, event: str | None) -> Waiting:
    """``Waiting(key=..., kind=..., at=..., event=...)``."""
    values = {"key": key, "kind": kind, "at": at, "event": event}
    return built(Waiting, values, _ALL_GIVEN[Waiting], validate=(
        kind not in _WAIT_KINDS
        or type(key) is not str
        or type(at) is not datetime
        or at.tzinfo is not UTC
    ))


def _run_change(run_id: str, flow_id: str, reason: str) -> RunChange:
    """``RunChange(run_id=..., flow_id=..., reason=...)``."""
    values = {"run_id": run_id, "flow_id": flow_id, "reason": reason}
    return built(RunChange, values, _ALL_GIVEN[RunChange], validate=type(reason) is not str)


_NEW_RUN_GIVEN = frozenset(
    (
        "id",
        "flow_id",
        "status",
        "step_id",
        "input",
        "started_at",
        "parent_run_id",
        "trigger",
        "origin",
    )
)


_CLAIM_GIVEN = frozenset(("at", "count"))


def _claim(at: datetime, count: int) -> Claim:
    """``Claim(at=..., count=...)``."""
    values = {"at": at, "count": count}
    return built(Claim, values, _CLAIM_GIVEN, validate=(
        type(at) is not datetime or at.tzinfo is not UTC or type(count) is not int
    ))


_RUN_ORIGINS = frozenset(("message", "mention", "event", "silence", "start", "flow"))


def _new_run(
    id: str,
    flow_id: str,
    step_id: str,
    input: dict[str, Any],
    started_at: datetime,
    parent_run_id: str | None,
    trigger: int | None,
    origin: str,
) -> Run:
    """``Run(id=..., flow_id=..., status="running", step_id=..., input=..., started_at=...,
    parent_run_id=..., trigger=..., origin=...)``, ``input`` a dict the caller made for it."""
    values = {
        "id": id,
        "flow_id": flow_id,
        "status": "running",
        "step_id": step_id,
        "visit": 1,
        "input": input,
        "asked": {},
        "waiting": None,
        "started_at": started_at,
        "parent_run_id": parent_run_id,
        "trigger": trigger,
        "origin": origin,
        "suspended_seq": None,
        "retries": 0,
        "last_talk_step_id": None,
        "stay_step_id": None,
    }
    return built(Run, values, _NEW_RUN_GIVEN, validate=(
        origin not in _RUN_ORIGINS
        or type(started_at) is not datetime
        or started_at.tzinfo is not UTC
        or (trigger is not None and type(trigger) is not int)
        or any(type(name) is not str for name in input)
    ))
