"""One input, start to finish: load → ``agent.turn`` → one save transaction → publish → mark.

The save-then-send rule of the service: the session, the turn-log row (with the record's topic,
partition and offset, unique) and the outbox rows commit together; only then are the rows
published, and only after their acks does the caller release the offset. So a crash at any
point loses nothing: an unsaved turn is replayed, a saved one is found in the turn log and only
its outbox is flushed again.

- A version conflict (another writer saved first) reloads and reruns, at most
  ``max_version_conflicts`` times, then raises ``VersionConflictsExhausted`` for ``decisions``.
- The load also says whether the record is already in the turn log and how many of the
  session's outbox rows are unpublished, so a turn costs three round trips: load, save, mark;
  each is shared with the turns that start or finish at the same time (one statement for all
  of them: ``LoadGroup``, ``SaveGroup``, ``PublishedMarks``), each turn keeping its own outcome.
- A record already in the turn log is skipped after re-flushing the session's unpublished rows,
  because its replies may be among them (no flush when the load found none).
- So is an input whose id the conversation already had (a message's ``id``, ``event:{key}``,
  ``start:{key}``), re-produced at another offset however long ago: a DLQ re-drive or an
  adapter's retry is answered once (outcome ``duplicate-input``). The load asks, and the save's
  unique index enforces it against a concurrent writer. Wakes carry no such id: a replayed
  wake finds nothing waiting on it and the engine answers ``stale-wake``.
- When the load found no unpublished rows, the turn's own rows go out as one batch through
  ``OutboxPublisher.publish_saved``. Otherwise publishing goes through ``flush_session``: the
  session's older unpublished rows go first. If another publisher holds some of them, this
  waits briefly for them to clear and otherwise leaves the rest to the relay (the rows are
  durable either way).

Errors other than the conflict are raised unchanged: what to do with them is ``decisions``'s job.
Nothing here logs message text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from consumer import metrics, tracing
from consumer.groups import LoadGroup, SaveGroup
from consumer.hosting.routing import BINDING_KEY, AgentRouter, Route, SingleAgent
from consumer.outbox import OutboxPublisher
from consumer.turns import crash
from consumer.turns.decisions import VersionConflictsExhausted
from consumer.turns.parser import ParsedInput
from engine.history import HistoryCache
from engine.recording import RecordingLevel, Tape, fields_written, taping
from store import (
    AlreadyApplied,
    ConsumedInput,
    DuplicateInput,
    LoadRequest,
    OutboxEntry,
    SaveRequest,
    SourceRecord,
    Store,
    TurnRecord,
    VersionConflict,
)
from store.history import history_entries

__all__ = [
    "Admission",
    "OutboundTopics",
    "PipelineResult",
    "TurnAgent",
    "TurnPipeline",
    "TurnWork",
    "burst_of",
    "request_of",
]

log = logging.getLogger("turnflow.pipeline")

_TURN_OUTCOMES = metrics.TURN_OUTCOME_VALUES  # the label values, pre-created at 0

# How long a publish waits for rows of its session that another publisher holds.
_HELD_ROWS_WAIT_S = 2.0
_HELD_ROWS_POLL_S = 0.05


class TurnAgent(Protocol):
    """What the pipeline needs of an agent: ``engine.Agent`` or a test double."""

    async def turn(self, request: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class OutboundTopics:
    """Where replies and timers go."""

    messages: str
    schedule: str


@dataclass(frozen=True)
class TurnWork:
    """A parsed input and where it came from; for a burst, the last message, with the earlier
    ones (each with its own record) in ``earlier``, oldest first."""

    parsed: ParsedInput
    source: SourceRecord
    timestamp_ms: int | None = None
    earlier: tuple[TurnWork, ...] = ()
    # Set by the consumer when the model could not answer the message in time: the turn's
    # ``fallback`` ({"reason", "message"}), answered without the model and logged with it.
    fallback: dict[str, str] | None = None
    # Set by the consumer when earlier attempts at this input failed: ``attempts`` (the failed
    # ones), ``last_error`` (its type, never its text) and ``waited_ms``, kept with the turn's
    # recording for the inspector (``delivery``).
    retries: dict[str, Any] | None = None
    # Set by the pipeline when the turn waited for its turn slot (``Admission.queued``).
    queued: Mapping[str, Any] | None = None

    @property
    def parts(self) -> list[TurnWork]:
        """Every input of the turn, oldest first, each one alone."""
        if not self.earlier:
            return [self]
        return [*self.earlier, TurnWork(self.parsed, self.source, self.timestamp_ms)]


@dataclass(frozen=True)
class Admission:
    """What ``before_turn`` answers: whether the input may still run (the object is true when
    it may), and, when its turn waited a millisecond or more for its turn slot, the wait:
    ``waited_ms``, ``plan`` (the plan's label, as in the metrics) and ``why`` (``plan-cap``,
    ``minute-budget``, ``model-backoff``, ``slots``: what held it), kept with the turn's
    recording for ``turnflow inspect`` like the failed attempts before it."""

    may_run: bool
    queued: Mapping[str, Any] | None = None

    def __bool__(self) -> bool:
        return self.may_run


def burst_of(parts: list[TurnWork]) -> TurnWork:
    """One work item answering ``parts`` (messages of one session, oldest first) together."""
    if len(parts) == 1:
        return parts[0]
    last = parts[-1]
    return TurnWork(
        parsed=last.parsed,
        source=last.source,
        timestamp_ms=parts[0].timestamp_ms,
        earlier=tuple(parts[:-1]),
    )


def request_of(work: TurnWork) -> dict[str, Any]:
    """The turn request of a work item: a burst's earlier messages go into ``burst``, and
    the images of all its messages, oldest first, into the turn's ``images`` (a photo sent
    just before "is this fixable?" is part of what the turn answers). Its messages share one
    ``context`` and ``silenced``: the consumer joins no others."""
    request = dict(work.parsed.request)
    if work.earlier:
        request["burst"] = [
            {k: p.parsed.request[k] for k in ("message", "id", "at") if k in p.parsed.request}
            for p in work.earlier
        ]
        images = [
            image for p in work.parts for image in p.parsed.request.get("images") or ()
        ]
        if images:
            request["images"] = images
    if work.fallback is not None:
        request["fallback"] = dict(work.fallback)
    return request


class TurnFenced(Exception):
    """``before_turn`` said the input may no longer run (its partition moved while it waited
    for a turn slot): no turn ran after the wait, and nothing of the input was saved or
    published (a rerun after a version conflict leaves its lost first attempt unsaved)."""


@dataclass(frozen=True)
class PipelineResult:
    """What happened to one input."""

    status: Literal["applied", "skipped", "duplicate"]
    version: int | None = None
    messages: int = 0
    schedule: int = 0
    llm_calls: int = 0
    conflicts: int = 0
    inputs: int = 1


def _json(value: Any) -> Any:
    """The JSON form of an engine value (pydantic model) or a plain dict from a double."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def _field(value: Any, name: str, default: Any = None) -> Any:
    if isinstance(value, dict):
        return value.get(name, default)
    return getattr(value, name, default)


def _json_items(value: Any, name: str) -> list[Any]:
    """The JSON form of each item of the list ``name`` of a result: once the result is dumped
    they are dicts already, taken as they are without asking each for a ``model_dump``."""
    return [item if type(item) is dict else _json(item) for item in _field(value, name) or ()]


def _message_extras(message: dict[str, Any]) -> dict[str, Any]:
    """A hand-off's notice, and ``meta`` (``agent_id``, ``provenance``) on every message of a
    lifecycle agent; plain engine messages keep exactly their own keys."""
    extras: dict[str, Any] = {}
    if message.get("handoff"):
        extras["handoff"] = message["handoff"]
    if message.get("agent_id") or message.get("provenance"):
        extras["meta"] = {
            "agent_id": message.get("agent_id"),
            "provenance": list(message.get("provenance") or []),
        }
    return extras


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


class TurnPipeline:
    """Runs inputs through the agent with the store and the outbox publisher."""

    def __init__(
        self,
        *,
        store: Store,
        agent: TurnAgent | None,
        publisher: OutboxPublisher,
        topics: OutboundTopics,
        history_limit: int = 50,
        max_version_conflicts: int = 5,
        recording: RecordingLevel = "off",
        router: AgentRouter | None = None,
        history_cache_sessions: int = 0,
    ) -> None:
        # Which agent answers each input: ``agent`` alone, unless a registry router is given.
        if router is None and agent is None:
            raise ValueError("a pipeline needs an agent or a router")
        self._router: AgentRouter = router if router is not None else SingleAgent(agent)
        self._publisher = publisher
        self._topics = topics
        self._max_conflicts = max_version_conflicts
        self._recording: RecordingLevel = recording
        # The history as text: the window is validated from it in one pass (entries_of_text).
        self._loads = LoadGroup(store, history_limit=history_limit, history_as_text=True)
        self._saves = SaveGroup(store)
        # The history windows of sessions served lately, kept between their turns.
        self._histories = HistoryCache(
            max_sessions=history_cache_sessions, limit=history_limit, decode=history_entries
        )

    async def close(self) -> None:
        """Cancel the grouped load and save in flight, if any: for shutdown, once the turns
        are stopped and before the store closes (``Grouped.close``). The publisher is the
        caller's to close."""
        await self._loads.close()
        await self._saves.close()

    def forget_partitions(self, partitions: set[tuple[str, int]]) -> None:
        """Drop the history windows of sessions last served from ``partitions`` (revoked)."""
        self._histories.drop_partitions(partitions)
        metrics.HISTORY_WINDOWS.set(len(self._histories))

    async def apply(
        self,
        work: TurnWork,
        *,
        may_publish: Callable[[], bool] = lambda: True,
        before_turn: Callable[[Route], Awaitable[Admission]] | None = None,
        after_turn: Callable[[], None] = lambda: None,
    ) -> PipelineResult:
        """Apply one input exactly once (per source record) and publish what it produced.

        ``before_turn`` and ``after_turn`` bracket each engine turn: the caller holds its turn
        slot between them, so the slot covers the model calls and nothing else. ``before_turn``
        is awaited after the load (a replay or a duplicate skipped at the load never awaits
        it), so the load's round trip is not spent holding a slot, and answers whether the
        input may still run (an ``Admission``); a false one raises ``TurnFenced`` (nothing
        ran, nothing was saved), and the wait it reports is kept with the turn's recording.
        It is given the turn's route, whose workspace and plan say whose turn waits.
        ``after_turn`` is called as soon as the engine turn returns or raises, before the save:
        the save and the publish are round trips with no model call, and the slot can go to
        another session's turn meanwhile. A version conflict at the save loads again and runs
        the turn again, so each attempt takes a slot (and says again whether it may run)."""
        parsed = work.parsed
        asked = work.parts
        fallback, retries = work.fallback, work.retries
        started = time.perf_counter()
        conflicts = 0
        while True:
            loaded = await self._loads.load(
                LoadRequest(
                    parsed.session_id,
                    sources=tuple(p.source for p in asked),
                    input_ids=tuple(
                        i for p in asked if (i := conversation_input_id(p.parsed.request))
                    ),
                    history_version=self._histories.held(parsed.session_id),
                )
            )
            if loaded.applied:
                return await self._skip_replay(work, may_publish, loaded.unpublished)
            live, consumed = _still_new(asked, loaded.applied_sources, loaded.duplicate_ids)
            if not live:
                return await self._skip_duplicate(work, may_publish, loaded.unpublished)
            given = loaded.history if loaded.history_json is None else loaded.history_json
            history = self._histories.take(
                parsed.session_id, loaded.version, given, loaded.history_held
            )
            if history is None:
                continue  # the window held for this version went meanwhile: load it
            if loaded.version:
                source = "held" if loaded.history_held else "loaded"
                metrics.child(metrics.HISTORY_LOADS, source).inc()
            work = burst_of(live)
            if fallback is not None or retries is not None:  # a burst's own work has neither
                work = dataclasses.replace(work, fallback=fallback, retries=retries)
            crash.reached("after_load")
            # Before the turn slot: a refused route (RouteRefused) ran nothing and saved nothing.
            route = await self._router.route(work.parsed, loaded.state)
            tracing.note_agent(route.agent_id, route.version, route.agent)
            if before_turn is not None:
                admission = await before_turn(route)
                if not admission:
                    raise TurnFenced(parsed.session_id)
                if admission.queued:
                    work = dataclasses.replace(work, queued=admission.queued)
            request = request_of(work)
            if route.fallback is not None:  # the pinned version is gone: routing.Route.fallback
                request["fallback"] = dict(route.fallback)
            if route.migrate_runs:  # moved to the live version by its run map
                request["migrate_runs"] = dict(route.migrate_runs)
            request["session"] = loaded.state
            request["history"] = list(history)
            try:
                with taping(self._recording) as tape:
                    # The result in its JSON form at once: one pass through pydantic-core for
                    # the session, messages, timers and outcomes instead of one call per item.
                    result = _json(await route.agent.turn(request))
            finally:
                after_turn()
            crash.reached("after_turn")
            version = loaded.version + 1
            save = self._save_request(
                work, loaded.version, version, result, tape, loaded.state, consumed, route
            )
            try:
                saved = await self._saves.save(save)
            except VersionConflict:
                conflicts += 1
                metrics.VERSION_CONFLICTS.inc()
                log.info(
                    "version conflict; rerunning the turn",
                    extra=self._ids(work) | {"conflicts": conflicts},
                )
                if conflicts > self._max_conflicts:
                    raise VersionConflictsExhausted(
                        session_id=parsed.session_id, attempts=conflicts
                    ) from None
                continue
            except AlreadyApplied:
                # A concurrent replay of this very record won the save: the same as a replay.
                return await self._skip_replay(work, may_publish)
            except DuplicateInput:
                # A concurrent copy of this input (another offset) won the save.
                return await self._skip_duplicate(work, may_publish)
            self._histories.extend(
                parsed.session_id, loaded.version, history, saved.version, saved.history,
                (work.source.topic, work.source.partition),
            )
            metrics.HISTORY_WINDOWS.set(len(self._histories))
            break

        crash.reached("after_save")
        if loaded.unpublished:
            await self._publish(parsed.session_id, saved.outbox_ids, may_publish)
        else:
            await self._publisher.publish_saved(
                parsed.session_id, saved.outbox_ids, save.outbox, may_publish=may_publish
            )
        crash.reached("after_publish")
        self._observe(work, result, started, route)
        # The counts as the save request took them from the result (one JSON item each).
        turn = save.turn
        messages, schedule, llm_calls = len(turn.messages), len(turn.schedule), turn.llm_calls
        applied = self._ids(work)
        applied.update(
            version=saved.version, messages=messages, schedule=schedule, llm_calls=llm_calls
        )
        log.info("turn applied", extra=applied)
        return PipelineResult(
            status="applied",
            version=saved.version,
            messages=messages,
            schedule=schedule,
            llm_calls=llm_calls,
            conflicts=conflicts,
            inputs=1 + len(work.earlier),
        )

    async def _skip_replay(
        self, work: TurnWork, may_publish: Callable[[], bool], unpublished: int | None = None
    ) -> PipelineResult:
        """Skip an applied record; flush the session unless the load found nothing to flush."""
        if unpublished is None or unpublished > 0:
            await self._publisher.flush_session(work.parsed.session_id, may_publish=may_publish)
        metrics.REPLAYS_SKIPPED.inc()
        log.info("replay skipped; outbox re-flushed", extra=self._ids(work))
        return PipelineResult(status="skipped")

    async def _skip_duplicate(
        self, work: TurnWork, may_publish: Callable[[], bool], unpublished: int | None = None
    ) -> PipelineResult:
        """Skip an input the conversation already had; flush the session as a replay does (the
        first copy's replies may still be unpublished)."""
        if unpublished is None or unpublished > 0:
            await self._publisher.flush_session(work.parsed.session_id, may_publish=may_publish)
        metrics.OUTCOMES.labels(code="duplicate-input").inc()
        log.info("duplicate input skipped; outbox re-flushed", extra=self._ids(work))
        return PipelineResult(status="duplicate")

    def _save_request(
        self,
        work: TurnWork,
        expected_version: int,
        version: int,
        result: Any,
        tape: Tape | None = None,
        before: dict[str, Any] | None = None,
        consumed: tuple[ConsumedInput, ...] = (),
        route: Route | None = None,
    ) -> SaveRequest:
        parsed = work.parsed
        state = _json(_field(result, "session"))
        # Before the binding joins the state's metadata: the recording's digest is of the
        # session the engine left, taken from this very dump (not a second one).
        model_calls = _recording(tape, before, state)
        if model_calls is not None:
            model_calls["delivery"] = delivery(work)
        if route is not None and route.binding is not None and isinstance(state, dict):
            # The conversation's agent and workspace travel with its session (routing.py).
            metadata = state.get("metadata")
            if not isinstance(metadata, dict):
                metadata = state["metadata"] = {}
            metadata[BINDING_KEY] = route.binding
        credits = _field(result, "credits")
        messages = _json_items(result, "messages")
        schedule = _json_items(result, "schedule")
        outbox = [
            OutboxEntry(
                topic=self._topics.messages,
                key=parsed.session_id,
                payload={
                    "session_id": parsed.session_id,
                    "key": m.get("key"),
                    "kind": m.get("kind"),
                    "text": m.get("text"),
                    "after_ms": m.get("after_ms", 0),
                    "run_id": m.get("run_id"),
                    "step_id": m.get("step_id"),
                    "input_id": parsed.input_id,
                    "version": version,
                    **_message_extras(m),
                },
            )
            for m in messages
        ] + [
            OutboxEntry(
                topic=self._topics.schedule,
                key=parsed.session_id,
                payload={
                    "session_id": parsed.session_id,
                    "key": s.get("key"),
                    "at": _iso(s.get("at")),
                    "replaces": s.get("replaces"),
                },
            )
            for s in schedule
        ]
        logged = request_of(work)
        if route is not None and route.fallback is not None:
            logged["fallback"] = dict(route.fallback)  # what the turn was asked: replay reads it
        if route is not None and route.migrate_runs:
            logged["migrate_runs"] = dict(route.migrate_runs)
        turn = TurnRecord(
            input=logged,
            messages=messages,
            schedule=schedule,
            outcomes=_json_items(result, "outcomes"),
            started=_json_items(result, "started"),
            ended=_json_items(result, "ended"),
            skipped=_json_items(result, "skipped"),
            llm_calls=int(_field(result, "llm_calls", 0) or 0),
            source=work.source,
            clock_at=tape.at if tape is not None else None,
            model_calls=model_calls,
            input_id=conversation_input_id(parsed.request),
            earlier=consumed,
            agent_id=route.agent_id if route is not None else None,
            agent_version=route.version if route is not None else None,
            workspace=route.workspace if route is not None else None,
            credits=credits if isinstance(credits, int) and not isinstance(credits, bool) else None,
        )
        trace = tracing.current_context()  # stored with the rows: see consumer.outbox
        return SaveRequest(
            session_id=parsed.session_id,
            expected_version=expected_version,
            state=state,
            turn=turn,
            outbox=outbox,
            traceparent=trace[0] if trace is not None else None,
            tracestate=trace[1] if trace is not None else None,
        )

    async def _publish(
        self, session_id: str, own_ids: list[int], may_publish: Callable[[], bool]
    ) -> None:
        """Flush the session; wait a little when another publisher holds some of our rows."""
        remaining = set(own_ids)
        deadline = time.monotonic() + _HELD_ROWS_WAIT_S
        while True:
            published = await self._publisher.flush_session(session_id, may_publish=may_publish)
            remaining.difference_update(published)
            if not remaining:
                return
            if time.monotonic() > deadline:
                log.warning(
                    "outbox rows held by another publisher; leaving them to it",
                    extra={"session_id": session_id, "rows": len(remaining)},
                )
                return
            await asyncio.sleep(_HELD_ROWS_POLL_S)

    def _observe(
        self, work: TurnWork, result: Any, started: float, route: Route | None = None
    ) -> None:
        llm_calls = int(_field(result, "llm_calls", 0) or 0)
        metrics.child(metrics.TURNS, work.parsed.kind).inc()
        metrics.LLM_CALLS_PER_TURN.observe(llm_calls)
        metrics.INPUTS_PER_TURN.observe(len(work.parts))
        if work.parsed.kind == "message":
            metrics.CUSTOMER_MESSAGES.inc(len(work.parts))
            metrics.MESSAGE_TURN_LLM_CALLS.inc(llm_calls)
        for outcome in _field(result, "outcomes", []) or []:
            metrics.child(metrics.OUTCOMES, str(_field(outcome, "code", "unknown"))).inc()
        outcome = turn_outcome(result)
        if outcome is not None:
            metrics.child(metrics.TURN_OUTCOMES, outcome).inc()
        credits = _field(result, "credits")
        if isinstance(credits, int) and credits > 0:
            metrics.child(metrics.AI_CREDITS, outcome or "none").inc(credits)
        role = None if route is None else route.role
        if role is not None:  # a registry agent: its version's role (routing.Route.role)
            if outcome is not None:
                metrics.child(metrics.AGENT_VERSION_OUTCOMES, role, outcome).inc()
            if isinstance(credits, int) and credits > 0:
                metrics.child(metrics.AGENT_VERSION_CREDITS, role).inc(credits)
        metrics.TURN_DURATION.observe(time.perf_counter() - started)
        if work.timestamp_ms is not None and (_field(result, "messages", []) or []):
            metrics.INPUT_TO_OUTBOUND.observe(max(0.0, time.time() - work.timestamp_ms / 1000))

    @staticmethod
    def _ids(work: TurnWork) -> dict[str, Any]:
        return {
            "session_id": work.parsed.session_id,
            "input_id": work.parsed.input_id,
            "kind": work.parsed.kind,
            "partition": work.source.partition,
            "offset": work.source.offset,
        }


def delivery(work: TurnWork) -> dict[str, Any]:
    """How the turn's input reached it, kept with its recording: ``record_at``, the time its
    record was written to the inbound topic (the Kafka record's timestamp: when the customer
    wrote, up to the adapter's own delay), the failed attempts before it ran, if any, and its
    wait for a turn slot, if it waited."""
    out: dict[str, Any] = {}
    if work.timestamp_ms is not None and work.timestamp_ms >= 0:
        try:
            out["record_at"] = (
                datetime.fromtimestamp(work.timestamp_ms / 1000, UTC).isoformat()
                .replace("+00:00", "Z")
            )
        except (OverflowError, OSError, ValueError):
            pass  # a timestamp no calendar holds: the record's time is not shown
    if work.retries:
        out["retries"] = dict(work.retries)
    if work.queued:
        out["queued"] = dict(work.queued)
    return out


def _recording(tape: Tape | None, before: Any, after: Any) -> dict[str, Any] | None:
    """The turn's recording as stored: the tape's calls and the fields the turn wrote. None
    when the agent did not record into the tape (it is not an ``engine.Agent`` wrapped by
    ``recorded_agent``): an empty list of calls would claim the turn made none."""
    if tape is None or tape.at is None:
        return None
    recorded = tape.to_json(after if isinstance(after, dict) else None)
    if recorded is None:
        return None
    recorded["fields"] = fields_written(before, after)
    return recorded


def _still_new(
    asked: list[TurnWork], applied: frozenset[SourceRecord], duplicates: frozenset[str]
) -> tuple[list[TurnWork], tuple[ConsumedInput, ...]]:
    """The inputs of a turn the log does not have yet (neither their record nor their id;
    an id repeated within the burst counts once), and what the turn records as consumed
    besides its last input: the other new ones with their ids, and the records of the
    duplicates without (so a replay of those records is recognised as one)."""
    seen = set(duplicates)
    live: list[TurnWork] = []
    dropped: list[TurnWork] = []
    for part in asked:
        if part.source in applied:
            continue
        own = conversation_input_id(part.parsed.request)
        if own is not None and own in seen:
            dropped.append(part)
            continue
        if own is not None:
            seen.add(own)
        live.append(part)
    consumed = [
        ConsumedInput(p.source, conversation_input_id(p.parsed.request)) for p in live[:-1]
    ] + [ConsumedInput(p.source, None) for p in dropped]
    return live, tuple(consumed)


def conversation_input_id(request: dict[str, Any]) -> str | None:
    """The id that makes an input a duplicate within its conversation, as the engine reads it:
    a message's own ``id``, ``event:{key}``, ``start:{key}``; None for wakes and id-less
    messages (those are deduplicated by their source record only)."""
    if "message" in request:
        own = request.get("id")
        return own if isinstance(own, str) and own else None
    if "event" in request and isinstance(request.get("key"), str):
        return f"event:{request['key']}"
    start = request.get("start")
    if isinstance(start, dict) and isinstance(start.get("key"), str):
        return f"start:{start['key']}"
    return None


def turn_outcome(result: Any) -> str | None:
    """The turn outcome the turn itself reported, for ``turnflow_turn_outcomes_total``.

    An agent with the hosted lifecycle states it (``turn_outcome``: answered, goal_completed,
    task_completed, handoff, fallback, error, gated); a result that states an ``outcome`` is
    likewise taken at its word. Nothing is guessed from outcome codes: a flow that moves to
    another flow is not a hand-off to a person, and a flow that ends is not a completed task.
    Without a stated outcome, a hand-off message (the only report of a hand-over to a person)
    is ``handoff``, any other reply is ``answered``, and a turn that said nothing is not counted
    (None). Inputs sent to the DLQ are counted as ``error`` by the service."""
    declared = _field(result, "turn_outcome")  # stated by agents with lifecycle settings
    if isinstance(declared, str):
        return declared if declared in _TURN_OUTCOMES else None
    stated = _field(result, "outcome")
    if isinstance(stated, str):
        return stated if stated in _TURN_OUTCOMES else None
    messages = _field(result, "messages", []) or []
    if any(_field(m, "kind") == "handoff" for m in messages):
        return "handoff"
    return "answered" if messages else None
