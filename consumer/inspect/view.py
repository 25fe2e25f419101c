"""The turn-by-turn view model of a conversation, built once from the rows of ``reading``.

Each turn reads in the order the engine worked: the *input* (what arrived, from where), what
the model *understood* (flow scores, extracted fields, its replies; from the turn's recording,
when it was kept), what the code *decided* (the outcome lines, each naming its flow and step;
runs started and ended; triggers skipped), and what was *sent* (each message with its key and
whether it is published or still in the outbox; timers set, replaced, fired or pending; the
credits billed). The terminal, ``--json`` and the web pages all render these objects.

Nothing here touches the database or formats for a medium: plain data in, plain data out.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from consumer.inspect.options import trace_link
from consumer.inspect.reading import ConversationRows, ListRow

__all__ = [
    "ConversationView",
    "Line",
    "ListItem",
    "Sent",
    "TimerView",
    "TurnView",
    "conversation_view",
    "dead_letter",
    "list_item",
    "path",
    "to_jsonable",
]

PREVIEW_CHARS = 120

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class Line:
    """One outcome line: what the code did, where (flow, step), and what it cost."""

    code: str
    flow: str | None = None
    step: str | None = None
    status: str | None = None
    detail: str | None = None
    llm_calls: int = 0
    credits: int | None = None


@dataclass(frozen=True)
class Sent:
    """A message the turn wrote for the customer (or the host, for a hand-off)."""

    kind: str
    text: str
    key: str | None
    step: str | None
    after_ms: int
    published: bool
    handoff: dict[str, Any] | None = None


@dataclass(frozen=True)
class TimerView:
    """A timer a turn set: ``state`` is pending (held by the scheduler or still in the outbox),
    replaced (a later turn set another in its place), fired (a wake with its key ran), stale
    (it fired, but nothing waited on it any more: the wake's ``stale-wake`` line), or
    not pending (the scheduler holds it no longer: fired, replaced or stale in turns not shown)."""

    key: str
    at: str | None
    replaces: str | None
    state: str


@dataclass
class TurnView:
    version: int
    at: datetime
    clock_at: datetime | None
    kind: str  # message, wake, event, start
    text: str | None  # the customer's message (burst parts joined), the event or timer name
    input_id: str | None
    source: str | None  # topic:partition:offset of the record
    input: dict[str, Any]
    understood: list[dict[str, Any]]  # the recorded model calls: kind, replies, extracted
    recorded: bool
    fields: dict[str, Any]
    decided: list[Line]
    started: list[dict[str, Any]]
    ended: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    sent: list[Sent]
    timers: list[TimerView]
    llm_calls: int
    credits: int | None
    incidents: list[str] = field(default_factory=list)
    # inputs of this conversation dead-lettered after the turn before this one, before it
    dead_before: list[dict[str, Any]] = field(default_factory=list)
    # the registry agent and version that ran the turn (None for an agent loaded from AGENT)
    agent: str | None = None
    # when the input's record was written to the inbound topic (the customer wrote), from the
    # turn's recording; None when nothing was recorded
    record_at: str | None = None
    # the failed attempts before the turn ran: attempts, last_error, waited_ms (None: none)
    retries: dict[str, Any] | None = None
    # the turn's wait for a turn slot: waited_ms, plan, why (plan-cap, minute-budget,
    # model-backoff, slots); None when it did not wait
    queued: dict[str, Any] | None = None
    # a fallback: the host answered without the model after it could not be reached
    fallback_reason: str | None = None
    # the turn's trace id (tracing on) and its page in the trace UI (TURNFLOW_TRACE_URL)
    trace_id: str | None = None
    trace_url: str | None = None

    @property
    def waited(self) -> str | None:
        """The turn's wait for its turn slot in words (how long, its plan, what held it)."""
        if not self.queued:
            return None
        why = self.queued.get("why")
        reasons = "; ".join(
            WAIT_REASONS.get(str(w), str(w)) for w in (why if isinstance(why, list) else [])
        )
        return (f"waited {self.queued.get('waited_ms')} ms for a turn slot "
                f"(plan {self.queued.get('plan')}): {reasons}")


WAIT_REASONS = {
    "plan-cap": "its plan's turns in flight were at their cap",
    "minute-budget": "its plan's model turns for the minute were spent",
    "model-backoff": "the model provider had asked to slow down",
    "slots": "every turn slot was taken",
}
"""What held a turn that waited for its slot (``TurnView.queued["why"]``), in words."""


@dataclass
class ConversationView:
    session_id: str
    turns_total: int
    first_version: int
    last_version: int
    created_at: datetime | None
    updated_at: datetime | None
    runs: list[dict[str, Any]]
    data: dict[str, Any]
    turns: list[TurnView]
    pending_timers: list[dict[str, Any]]
    unpublished: list[dict[str, Any]]
    dead_lettered: list[dict[str, Any]]
    dead_after: list[dict[str, Any]] = field(default_factory=list)  # after the page's last turn

    @property
    def path(self) -> list[tuple[str, str]]:
        """The (flow, step) pairs this page's turns went through, for the diagram."""
        return path([[{"flow_id": line.flow, "step_id": line.step} for line in turn.decided]
                     for turn in self.turns])

    @property
    def has_earlier(self) -> bool:
        return self.first_version > 1

    @property
    def has_later(self) -> bool:
        return self.last_version < self.turns_total


@dataclass(frozen=True)
class ListItem:
    session_id: str
    turns: int
    created_at: datetime
    updated_at: datetime
    at: datetime
    runs: list[dict[str, Any]]
    last_kind: str | None
    last_text: str | None
    incidents: list[str]
    with_person: bool = False  # handed off, and not yet given back (handoff_cleared)
    dead_reason: str | None = None  # the last dead-lettered input's reason and words
    dead_text: str | None = None
    handoff_reason: str | None = None


def list_item(row: ListRow) -> ListItem:
    kind, text = _input_text(row.last_input or {}) if row.last_input else (None, None)
    incidents = list(row.incidents) + (["dead-lettered"] if row.dead_lettered else [])
    return ListItem(
        session_id=row.session_id, turns=row.turns, created_at=row.created_at,
        updated_at=row.updated_at, at=row.at, runs=_runs(row.state), last_kind=kind,
        last_text=_preview(text), incidents=incidents, with_person=_with_person(row.state),
        dead_reason=row.dead_reason, dead_text=_preview(row.dead_message),
        handoff_reason=row.handoff_reason,
    )


def conversation_view(
    rows: ConversationRows, *, trace_url: str | None = None
) -> ConversationView:
    """The page's model of ``rows``; ``trace_url`` (``options.trace_url``) links each traced
    turn to its trace."""
    unpublished_keys = {
        (r["payload"] or {}).get("key") for r in rows.unpublished if isinstance(r["payload"], dict)
    }
    pending_timer_keys = {t["key"] for t in rows.timers}
    # A timer whose outbox row is not yet published has not reached the scheduler: pending too.
    pending_timer_keys |= {
        (r["payload"] or {}).get("key") for r in rows.unpublished
        if isinstance(r["payload"], dict) and "at" in r["payload"] and "kind" not in r["payload"]
    }
    woken = {t["input"].get("wake") for t in rows.turns if t["input"].get("wake")}
    stale = {
        o.get("detail") for t in rows.turns for o in t["outcomes"] or []
        if o.get("code") == "stale-wake"
    }
    replaced = {
        s.get("replaces") for t in rows.turns for s in t["schedule"] or [] if s.get("replaces")
    }
    turns = []
    for t in rows.turns:
        turn = _turn_view(t, unpublished_keys, pending_timer_keys, woken - stale, stale,
                          replaced)
        if turn.trace_id is not None and trace_url is not None:
            turn = replace(turn, trace_url=trace_link(trace_url, turn.trace_id))
        turns.append(turn)
    dead = [dead_letter(d) for d in rows.dead_lettered]
    dead_after = _place(dead, turns, whole_start=rows.first_version <= 1,
                        whole_end=rows.last_version >= rows.session["version"])
    state = rows.session["state"] or {}
    return ConversationView(
        session_id=rows.session["id"],
        turns_total=rows.session["version"],
        first_version=rows.first_version,
        last_version=rows.last_version,
        created_at=rows.session["created_at"],
        updated_at=rows.session["updated_at"],
        runs=_runs(state),
        data=dict(state.get("data") or {}),
        turns=turns,
        pending_timers=[{"key": t["key"], "at": t["at"]} for t in rows.timers],
        unpublished=[
            {"id": r["id"], "topic": r["topic"], "key": (r["payload"] or {}).get("key"),
             "kind": (r["payload"] or {}).get("kind"), "created_at": r["created_at"]}
            for r in rows.unpublished
        ],
        dead_lettered=dead,
        dead_after=dead_after,
    )


def dead_letter(row: dict[str, Any]) -> dict[str, Any]:
    """A ``dead_lettered_sources`` row as the pages show it: the inbound record's source
    (``topic:partition:offset`` on the inbound topic), the reason and its detail, the session
    it names (``""``: none) and what it said (message text, input id, key), each None where
    nothing could be read."""
    return {
        "source": f"{row['source_topic']}:{row['source_partition']}:{row['source_offset']}",
        "reason": row["reason"],
        "at": row["created_at"],
        "session_id": row.get("session_id") or "",
        "detail": row.get("detail"),
        "message": row.get("message"),
        "input_id": row.get("input_id"),
        "key": row.get("record_key"),
    }


def _place(
    dead: list[dict[str, Any]], turns: list[TurnView], *, whole_start: bool, whole_end: bool
) -> list[dict[str, Any]]:
    """Put each dead-lettered input in the timeline where it happened: before the first turn
    of the page saved after it. Those before the page (when it has earlier turns) stay only in
    the list at the top; those after its last turn are returned (shown after it when the page
    is the conversation's end)."""
    after: list[dict[str, Any]] = []
    for letter in sorted(dead, key=lambda d: d["at"]):
        following = next((t for t in turns if t.at >= letter["at"]), None)
        if following is None:
            if whole_end:
                after.append(letter)
        elif following is not turns[0] or whole_start:
            following.dead_before.append(letter)
    return after


def path(outcome_lines: list[list[dict[str, Any]]]) -> list[tuple[str, str]]:
    """The (flow, step) pairs outcome lines name, in order, a step repeated back to back once:
    the path the diagram highlights."""
    out: list[tuple[str, str]] = []
    for lines in outcome_lines:
        for line in lines:
            flow, step = line.get("flow_id"), line.get("step_id")
            if flow and step and (not out or out[-1] != (flow, step)):
                out.append((str(flow), str(step)))
    return out


def _turn_view(
    t: dict[str, Any], unpublished: set[Any], pending: set[Any], woken: set[Any],
    stale: set[Any], replaced: set[Any],
) -> TurnView:
    given = t["input"] or {}
    kind, text = _input_text(given)
    lines = [
        Line(code=str(o.get("code")), flow=o.get("flow_id"), step=o.get("step_id"),
             status=o.get("status"), detail=o.get("detail"),
             llm_calls=int(o.get("llm_calls") or 0), credits=o.get("credits"))
        for o in t["outcomes"] or []
    ]
    credits = [line.credits for line in lines if line.credits is not None]
    recording = t.get("model_calls") or None
    delivery = (recording or {}).get("delivery") or {}
    if recording is not None and "calls" not in recording:
        recording = None
    sent = [
        Sent(kind=str(m.get("kind")), text=str(m.get("text") or ""), key=m.get("key"),
             step=m.get("step_id"), after_ms=int(m.get("after_ms") or 0),
             published=m.get("key") not in unpublished, handoff=m.get("handoff"))
        for m in t["messages"] or []
    ]
    timers = []
    for s in t["schedule"] or []:
        key = s.get("key")
        if key in pending:
            state = "pending"
        elif key in stale:
            state = "stale"
        elif key in woken:
            state = "fired"
        elif key in replaced:
            state = "replaced"
        else:
            state = "not pending"
        timers.append(TimerView(key=str(key), at=s.get("at"), replaces=s.get("replaces"),
                                state=state))
    source = (
        f"{t['source_topic']}:{t['source_partition']}:{t['source_offset']}"
        if t.get("source_topic") else None
    )
    return TurnView(
        version=int(t["version"]), at=t["created_at"], clock_at=t.get("clock_at"), kind=kind,
        text=text, input_id=t.get("input_id"), source=source,
        input={k: v for k, v in given.items() if k not in ("session_id",)},
        understood=_understood(recording), recorded=recording is not None,
        fields=dict((recording or {}).get("fields") or {}),
        decided=lines, started=list(t["started"] or []), ended=list(t["ended"] or []),
        skipped=list(t["skipped"] or []), sent=sent, timers=timers,
        llm_calls=int(t["llm_calls"] or 0), credits=sum(credits) if credits else None,
        incidents=_incidents(lines),
        agent=_agent(t),
        record_at=delivery.get("record_at"),
        retries=delivery.get("retries") or None,
        queued=delivery.get("queued") or None,
        fallback_reason=next((line.detail or "" for line in lines if line.code == "fallback"),
                             None),
        trace_id=_trace_id(t.get("trace_id")),
    )


def _trace_id(value: Any) -> str | None:
    """A stored trace id, shown only when it is one (32 lowercase hex digits)."""
    return value if isinstance(value, str) and _TRACE_ID.match(value) else None


def _agent(t: dict[str, Any]) -> str | None:
    """The registry agent and version that ran the turn; an agent loaded from ``AGENT`` has
    neither (its name is the inspector's ``--agent``), so none is named."""
    if not t.get("agent_id"):
        return None
    version = t.get("agent_version")
    return f"{t['agent_id']} v{version}" if version is not None else str(t["agent_id"])


def _understood(recording: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The recorded model calls as the page shows them: the call's kind, whether it worked,
    what it returned (the JSON it gave, else its text), its time and tokens, and how many of
    its prompt tokens came from the server's prompt cache."""
    if not recording:
        return []
    out = []
    for call in recording.get("calls") or []:
        reply = call.get("reply") or {}
        out.append({
            "kind": call.get("kind"),
            "ok": bool(call.get("ok")),
            "json": reply.get("json"),
            "text": reply.get("text"),
            "error": call.get("error"),
            "latency_ms": call.get("latency_ms"),
            "input_tokens": call.get("input_tokens"),
            "output_tokens": call.get("output_tokens"),
            # Of the prompt's tokens, those the server read from its prompt cache (recorded
            # only when the server reports them).
            "cache_read_tokens": call.get("cache_read_tokens"),
        })
    return out


def _incidents(lines: list[Line]) -> list[str]:
    """The incident kinds of ``store.incidents`` this turn's lines show (the same tests, in
    Python, for the page: the SQL decides the list, this marks the turn)."""
    codes = {(line.code, line.detail) for line in lines}
    out = []
    if any(line.code == "handoff" and line.status is None and line.step is None
           for line in lines):
        out.append("handoff")
    if ("billed", "not billed (fallback)") in codes or any(
        line.code == "fallback" for line in lines
    ):
        out.append("fallback")
    if any(line.code in ("action-failed", "deferred") for line in lines) or (
        ("billed", "not billed (error)") in codes
    ):
        out.append("error")
    if any(line.code == "gated" for line in lines):
        out.append("gated")
    return out


def _input_text(given: dict[str, Any]) -> tuple[str, str | None]:
    if given.get("message") is not None:
        parts = [str(b.get("message", "")) for b in given.get("burst") or []]
        return "message", "\n".join([*parts, str(given["message"])])
    if given.get("wake") is not None:
        return "wake", str(given["wake"])
    if given.get("event") is not None:
        return "event", str(given["event"])
    if given.get("start") is not None:
        start = given["start"]
        return "start", str(start.get("key") if isinstance(start, dict) else start)
    return "unknown", None


def _with_person(state: dict[str, Any]) -> bool:
    lifecycle = (state.get("metadata") or {}).get("lifecycle") or {}
    return isinstance(lifecycle, dict) and bool(lifecycle.get("handoff"))


def _runs(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"flow": r.get("flow_id"), "step": r.get("step_id"), "status": r.get("status")}
        for r in state.get("runs") or [] if isinstance(r, dict)
    ]


def _preview(text: str | None) -> str | None:
    if text is None:
        return None
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def to_jsonable(value: Any) -> Any:
    """A view object as plain JSON values (times in ISO 8601), for ``--json``."""
    if hasattr(value, "__dataclass_fields__"):
        value = asdict(value)
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value
