"""The records a turn builds without validation (``engine.records`` and the factories built on
it) are the very objects the validated construction gives: the same type, field values of the
same types, the same fields counted as given, no shared default, the same dumps. Each factory
is compared with its validated construction over generated inputs, the inputs that must take
the validated path included."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from engine import Agent, FakeClock, history
from engine import request as request_module
from engine import state as turn_state
from engine.phases import finish, speak
from engine.providers import RuleProvider, http
from engine.providers.base import (
    CallRecord,
    ChatMessage,
    ModelRequest,
    ModelResponse,
    ToolSpec,
    Usage,
)
from engine.records import copy_record, write
from engine.request import (
    BurstMessage,
    HistoryEntry,
    Message,
    Outcome,
    RunChange,
    ScheduleEntry,
    TurnRequest,
    TurnResult,
)
from engine.session import Claim, Run, Session, Waiting, fresh_session


class Text(str):
    """A str subclass: validation gives a plain str for it."""


def assert_same(fast: BaseModel, slow: BaseModel) -> None:
    assert type(fast) is type(slow)
    assert fast.__dict__ == slow.__dict__
    assert list(fast.__dict__) == list(slow.__dict__)  # the same field order
    for name, value in slow.__dict__.items():
        assert type(fast.__dict__[name]) is type(value), name
        if isinstance(value, datetime):
            assert fast.__dict__[name].tzinfo is value.tzinfo, name
    assert fast.model_fields_set == slow.model_fields_set
    assert type(fast.model_fields_set) is set
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump(mode="json") == slow.model_dump(mode="json")
    assert fast.model_dump(exclude_unset=True) == slow.model_dump(exclude_unset=True)
    assert fast.model_dump_json() == slow.model_dump_json()


def assert_unshared(one: BaseModel, other: BaseModel) -> None:
    """Two records built alike share no mutable default (a list or dict of their own each)."""
    for name, value in one.__dict__.items():
        if isinstance(value, list | dict | set):
            assert other.__dict__[name] is not value, name


texts = st.one_of(st.text(max_size=20), st.text(max_size=5).map(Text))
ids = st.one_of(st.none(), st.text(max_size=10))
small_ints = st.integers(min_value=-(2**40), max_value=2**40)
# UTC itself, a UTC that is another tzinfo object, another zone, naive.
zones = st.sampled_from([UTC, ZoneInfo("UTC"), timezone(timedelta(hours=-3)), None])
times = st.builds(
    lambda moment, zone: moment.replace(tzinfo=zone),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    zones,
)


@settings(max_examples=300, deadline=None)
@given(
    code=texts,
    run_id=ids,
    flow_id=ids,
    step_id=st.one_of(ids, st.text(max_size=3).map(Text)),
    status=st.one_of(ids, st.sampled_from(["running", "asking", "ended", "idle"])),
    detail=st.one_of(ids, st.text(max_size=3).map(Text)),
    llm_calls=st.one_of(small_ints, st.booleans()),
)
def test_outcome(
    code: str,
    run_id: str | None,
    flow_id: str | None,
    step_id: str | None,
    status: str | None,
    detail: str | None,
    llm_calls: int,
) -> None:
    args = (code, run_id, flow_id, step_id, status, detail, llm_calls)
    slow = Outcome(
        code=code,
        run_id=run_id,
        flow_id=flow_id,
        step_id=step_id,
        status=status,
        detail=detail,
        llm_calls=llm_calls,
    )
    assert_same(turn_state._outcome(*args), slow)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["ai", "verbatim", "handoff"]),
    text=texts,
    key=texts,
    after_ms=st.one_of(small_ints, st.booleans()),
    run_id=ids,
    step_id=st.one_of(ids, st.text(max_size=3).map(Text)),
)
def test_message(
    kind: str, text: str, key: str, after_ms: int, run_id: str | None, step_id: str | None
) -> None:
    slow = Message(
        kind=kind, text=text, key=key, after_ms=after_ms, run_id=run_id, step_id=step_id
    )
    fast = turn_state._message(kind, text, key, after_ms, run_id, step_id)
    assert_same(fast, slow)
    assert_unshared(fast, turn_state._message(kind, text, key, after_ms, run_id, step_id))


def test_message_refuses_what_validation_refuses() -> None:
    with pytest.raises(ValueError):
        turn_state._message("shout", "oi", "k", 0, None, None)


@settings(max_examples=200, deadline=None)
@given(key=texts, at=times, replaces=ids)
def test_schedule_entry(key: str, at: datetime, replaces: str | None) -> None:
    slow = ScheduleEntry(key=key, at=at, replaces=replaces)
    assert_same(turn_state._schedule_entry(key, at, replaces), slow)


@settings(max_examples=200, deadline=None)
@given(
    key=texts,
    kind=st.sampled_from(["timer", "event", "defer", "retry", "trigger"]),
    at=times,
    event=ids,
)
def test_waiting(key: str, kind: Any, at: datetime, event: str | None) -> None:
    slow = Waiting(key=key, kind=kind, at=at, event=event)
    assert_same(turn_state._waiting(key, kind, at, event), slow)


@settings(max_examples=100, deadline=None)
@given(run_id=st.text(max_size=10), flow_id=st.text(max_size=10), reason=texts)
def test_run_change(run_id: str, flow_id: str, reason: str) -> None:
    slow = RunChange(run_id=run_id, flow_id=flow_id, reason=reason)
    assert_same(turn_state._run_change(run_id, flow_id, reason), slow)


@settings(max_examples=100, deadline=None)
@given(at=times, count=st.one_of(small_ints, st.booleans()))
def test_claim(at: datetime, count: int) -> None:
    assert_same(turn_state._claim(at, count), Claim(at=at, count=count))


@settings(max_examples=100, deadline=None)
@given(session_id=texts)
def test_fresh_session(session_id: str) -> None:
    slow = Session(id=session_id)
    assert_same(fresh_session(session_id), slow)
    assert_unshared(fresh_session(session_id), fresh_session(session_id))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    id=st.text(max_size=10),
    flow_id=st.text(max_size=10),
    step_id=st.text(max_size=10),
    input=st.dictionaries(st.one_of(st.text(max_size=4), st.text(max_size=2).map(Text)),
                          json_values, max_size=3),
    started_at=times,
    parent_run_id=ids,
    trigger=st.one_of(st.none(), st.integers(min_value=0, max_value=9), st.booleans()),
    origin=st.sampled_from(["message", "mention", "event", "silence", "start", "flow"]),
)
def test_new_run(
    id: str,
    flow_id: str,
    step_id: str,
    input: dict[str, Any],
    started_at: datetime,
    parent_run_id: str | None,
    trigger: int | None,
    origin: str,
) -> None:
    slow = Run(
        id=id,
        flow_id=flow_id,
        status="running",
        step_id=step_id,
        input=dict(input),
        started_at=started_at,
        parent_run_id=parent_run_id,
        trigger=trigger,
        origin=origin,  # type: ignore[arg-type]
    )
    def fast() -> Run:  # new_run passes a dict made for the run
        return turn_state._new_run(
            id, flow_id, step_id, dict(input), started_at, parent_run_id, trigger, origin
        )

    assert_same(fast(), slow)
    assert_unshared(fast(), fast())


@settings(max_examples=200, deadline=None)
@given(
    role=st.sampled_from(["user", "assistant", "tool"]),
    text=st.text(max_size=10),
    at=st.one_of(st.none(), times),
    given_at=st.booleans(),
)
def test_copy_record_is_model_copy(
    role: str, text: str, at: datetime | None, given_at: bool
) -> None:
    entry = HistoryEntry(role=role, text=text, at=at) if given_at else HistoryEntry(
        role=role, text=text  # type: ignore[arg-type]
    )
    fast, slow = copy_record(entry), entry.model_copy()
    assert_same(fast, slow)
    assert fast is not entry and fast.__dict__ is not entry.__dict__
    assert fast.model_fields_set is not entry.model_fields_set


def test_copy_record_with_private_values_takes_model_copy() -> None:
    class WithPrivate(BaseModel):
        a: int = 1
        _note: str = "x"

    model = WithPrivate()
    copied = copy_record(model)
    assert copied.__pydantic_private__ == {"_note": "x"}
    assert copied.__pydantic_private__ is not model.__pydantic_private__


RUN_WRITES = st.sampled_from(
    [
        ("status", st.sampled_from(["running", "asking", "waiting", "suspended"])),
        ("step_id", st.text(max_size=5)),
        ("visit", st.integers(min_value=1, max_value=99)),
        ("retries", st.integers(min_value=0, max_value=9)),
        ("suspended_seq", st.one_of(st.none(), st.integers(min_value=1, max_value=99))),
        ("last_talk_step_id", ids),
        ("stay_step_id", ids),
        ("waiting", st.none()),
    ]
)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), writes=st.lists(RUN_WRITES, max_size=8), full=st.booleans())
def test_write_is_setattr(data: st.DataObject, writes: list[Any], full: bool) -> None:
    def fresh() -> Run:
        if full:  # a run read back from a dump: every field given
            return Run.model_validate(
                Run(id="r", flow_id="f", step_id="a", started_at=START).model_dump()
            )
        return Run(id="r", flow_id="f", step_id="a", started_at=START)

    fast, slow = fresh(), fresh()
    for name, values in writes:
        value = data.draw(values)
        write(fast, **{name: value})
        setattr(slow, name, value)
    assert_same(fast, slow)


START = datetime(2026, 1, 5, 9, tzinfo=UTC)


def test_run_allows_plain_writes() -> None:
    """``write`` stands for setattr only on a model that neither validates assignment nor is
    frozen: the day ``Run`` does either, the writes must go back to setattr."""
    assert not Run.model_config.get("validate_assignment")
    assert not Run.model_config.get("frozen")
    assert not any(field.frozen for field in Run.model_fields.values())


@settings(max_examples=100, deadline=None)
@given(role=st.sampled_from(["user", "assistant"]), text=texts)
def test_chat_message(role: Any, text: str) -> None:
    fast = history._chat_message(role, text)
    assert_same(fast, ChatMessage(role=role, text=text))
    assert_unshared(fast, history._chat_message(role, text))


# Message ids as a validated request holds them: not empty, no event:/start: prefix.
message_ids = st.one_of(
    st.none(),
    st.text(min_size=1, max_size=10).filter(lambda s: not s.startswith(("event:", "start:"))),
    st.text(min_size=1, max_size=3).map(Text),
)


@settings(max_examples=200, deadline=None)
@given(message=texts, id=message_ids, at=st.one_of(st.none(), times))
def test_burst_message(message: str, id: str | None, at: datetime | None) -> None:
    assert_same(
        request_module._burst_message(message, id, at),
        BurstMessage(message=message, id=id, at=at),
    )


@settings(max_examples=200, deadline=None)
@given(
    message=st.one_of(st.none(), texts),
    id=message_ids,
    at=st.one_of(st.none(), times),
    burst=st.lists(st.text(max_size=5), max_size=2),
)
def test_message_texts_are_the_parts_messages(
    message: str | None, id: str | None, at: datetime | None, burst: list[str]
) -> None:
    """``message_texts`` (the prompts' and ``text``'s way to the messages) gives what reading
    ``parts`` gives, for requests built without validation too (a str subclass, a time not in
    UTC, a burst beside no message)."""
    request = TurnRequest(session_id="s", message="oi").model_copy(
        update={"message": message, "id": id, "at": at,
                "burst": [BurstMessage(message=text) for text in burst]}
    )
    texts = request_module.message_texts(request)
    expected = [part.message for part in request.parts]
    assert texts == expected
    assert [type(text) for text in texts] == [type(text) for text in expected]
    assert request.text == (None if message is None else "\n".join(expected))


def test_parts_of_a_request_built_without_validation() -> None:
    """``parts`` of a request whose ``at`` was set without validation (not in UTC) is still
    what validation makes of it."""
    request = TurnRequest(session_id="s", message="oi", id="m1").model_copy(
        update={"at": datetime(2026, 1, 5, 9, tzinfo=timezone(timedelta(hours=-3)))}
    )
    (part,) = request.parts
    assert part.at == datetime(2026, 1, 5, 12, tzinfo=UTC) and part.at.tzinfo is UTC


AGENT = Agent(
    name="Ana",
    provider=RuleProvider(),  # answers any number of calls
    clock=FakeClock("2026-01-05T09:00:00Z"),
    actions={"count": lambda ctx: {"ok": True}},
    flows=[
        {
            "id": "oferta",
            "on": [{"message": []}],
            "steps": [
                {"id": "s1", "say": "Olá!"},
                {"id": "s2", "do": "count"},
                {"id": "s3", "prompt": "Responda."},
                {"id": "s4", "wait": {"ms": 60_000}},
            ],
        },
        {"id": "outro", "on": [{"message": ["outro"]}], "steps": [{"id": "a", "say": "x"}]},
    ],
)


RESULT_FIELDS = (
    "session", "changed", "messages", "schedule", "outcomes", "started", "ended", "skipped",
    "llm_calls",
)


@pytest.mark.parametrize(
    "request_",
    [
        {"session_id": "s", "message": "oi", "id": "m1"},
        {"session_id": "s", "wake": "nothing-waits"},
        {"session_id": "s", "start": {"flow": "outro", "key": "k"}},
    ],
)
def test_result_is_the_validated_result(request_: dict[str, Any]) -> None:
    result = asyncio.run(AGENT.turn(request_))
    given = {name: getattr(result, name) for name in RESULT_FIELDS}
    fast, slow = finish._result(given), TurnResult(**given)
    assert_same(fast, slow)
    assert fast.session is slow.session is given["session"]
    for name, _ in finish._RESULT_LISTS:
        assert getattr(fast, name) is not given[name]
        assert all(a is b for a, b in zip(getattr(fast, name), given[name], strict=True))


def test_result_with_an_item_validation_would_convert() -> None:
    result = asyncio.run(AGENT.turn({"session_id": "s", "message": "oi", "id": "m1"}))
    given = {name: getattr(result, name) for name in RESULT_FIELDS}
    given["outcomes"] = [*given["outcomes"], {"code": "from-a-dict"}]
    fast = finish._result(given)
    assert_same(fast, TurnResult(**given))
    assert isinstance(fast.outcomes[-1], Outcome)


@settings(max_examples=200, deadline=None)
@given(
    provider=texts,
    schema_name=st.sampled_from(["speak", "understand"]),
    duration_s=st.one_of(st.floats(allow_nan=False), st.integers(min_value=0, max_value=9)),
    ok=st.booleans(),
    given_=st.one_of(
        st.builds(lambda kind: {"error_kind": kind}, st.one_of(texts, st.none())),
        st.builds(
            lambda usage: {"usage": usage},
            st.one_of(st.none(), st.builds(Usage, input_tokens=st.integers(0, 9))),
        ),
        st.builds(
            lambda model, error_type: {"model": model, "error_type": error_type},
            st.one_of(texts, st.none()), st.one_of(texts, st.none()),
        ),
        st.builds(
            lambda text: {"request": ModelRequest(schema_name="speak", system=text),
                          "response": ModelResponse(text=text, model=text)},
            texts,
        ),
    ),
)
def test_call_record(
    provider: str, schema_name: str, duration_s: float, ok: bool, given_: dict[str, Any]
) -> None:
    slow = CallRecord(
        provider=provider, schema_name=schema_name, duration_s=duration_s, ok=ok, **given_
    )
    assert_same(http._call_record(provider, schema_name, duration_s, ok, **given_), slow)


def test_speak_request_is_the_validated_request() -> None:
    messages = [ChatMessage(role="user", text="oi"), ChatMessage(role="assistant", text="olá")]
    tools = [ToolSpec(name="t", description="d")]
    schema = {"type": "object", "properties": {"message": {"type": ["string", "null"]}}}
    meta = {"prompt": "p", "round": 1, "tools": ["t"], "known": {"nome": "Ana"}}
    args = (messages, schema, tools, meta)
    fast = speak._speak_request("system", *args)
    slow = ModelRequest(
        schema_name="speak",
        system="system",
        messages=messages,
        json_schema=schema,
        tools=tools,
        meta=meta,
        turn_sections_at=None,
        prefix=None,
        conversation=None,
    )
    assert_same(fast, slow)
    for name, given_ in zip(("messages", "json_schema", "tools", "meta"), args, strict=True):
        built, validated = getattr(fast, name), getattr(slow, name)
        assert built is not given_ and validated is not given_  # new containers, both ways
        items = given_.values() if isinstance(given_, dict) else given_
        built_items = built.values() if isinstance(built, dict) else built
        assert all(a is b for a, b in zip(built_items, items, strict=True))


def test_speak_request_with_an_item_validation_would_convert() -> None:
    fast = speak._speak_request(
        "system", [{"role": "user", "text": "oi"}], {}, [], {}  # type: ignore[list-item]
    )
    assert type(fast.messages[0]) is ChatMessage


class EditableEntry(HistoryEntry):
    model_config = ConfigDict(frozen=False)


HISTORY = [
    {"role": "user", "text": "oi", "at": "2026-01-05T08:59:00Z"},
    {"role": "assistant", "text": "Olá!", "at": "2026-01-05T08:59:01Z"},
]


@pytest.mark.parametrize(
    ("make_request", "copies"),
    [
        # History entries validated from dicts for this turn alone: nobody else holds them.
        (lambda: {"session_id": "s", "message": "oi", "id": "m1", "history": HISTORY}, 0),
        (lambda: {"session_id": "s", "message": "oi", "id": "m1", "history": tuple(HISTORY)}, 0),
        (lambda: {"session_id": "s", "message": "oi", "id": "m1"}, 0),
        # Entries the caller built, or a request object the caller holds: frozen, so shared.
        (
            lambda: {
                "session_id": "s",
                "message": "oi",
                "id": "m1",
                "history": [HistoryEntry.model_validate(e) for e in HISTORY],
            },
            0,
        ),
        (
            lambda: {
                "session_id": "s",
                "message": "oi",
                "id": "m1",
                "history": [HISTORY[0], HistoryEntry.model_validate(HISTORY[1])],
            },
            0,
        ),
        (
            lambda: TurnRequest.model_validate(
                {"session_id": "s", "message": "oi", "id": "m1", "history": HISTORY}
            ),
            0,
        ),
        # An entry of a subclass may be editable: every entry copied.
        (
            lambda: {
                "session_id": "s",
                "message": "oi",
                "id": "m1",
                "history": [HistoryEntry.model_validate(HISTORY[0]),
                            EditableEntry.model_validate(HISTORY[1])],
            },
            2,
        ),
    ],
)
def test_load_copies_the_history_entries_a_caller_may_edit(
    make_request: Any, copies: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.phases import load

    copied: list[Any] = []

    def counting(entry: Any) -> Any:
        copied.append(entry)
        return copy_record(entry)

    monkeypatch.setattr(load, "copy_record", counting)
    asyncio.run(AGENT.turn(make_request()))
    assert len(copied) == copies


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.text(max_size=30),
                          st.one_of(st.none(), st.datetimes(timezones=st.just(UTC)))),
                max_size=8))
def test_shared_fields_sets_change_nothing_but_the_objects(
    made: list[tuple[Any, str, datetime | None]],
) -> None:
    """History entries given one fields set between them (as a consumer keeps a window) dump,
    compare and copy as each with its own; a copy with an update gets its own set and leaves
    the shared one as it was; and the chat message kept on an entry is the one built fresh."""
    from engine.records import share_fields_sets, shared_fields_set

    def entries() -> list[HistoryEntry]:
        return [HistoryEntry(role=r, text=t) if at is None else HistoryEntry(role=r, text=t, at=at)
                for r, t, at in made]

    own, shared = entries(), entries()
    share_fields_sets(shared)
    for a, b in zip(own, shared, strict=True):
        assert_same(b, a)
        assert b.__pydantic_fields_set__ is shared_fields_set(frozenset(a.model_fields_set))
        changed = b.model_copy(update={"text": "changed"})
        assert changed.__pydantic_fields_set__ is not b.__pydantic_fields_set__
        assert b.model_fields_set == a.model_fields_set  # the shared set is as it was
        kept = history._kept_chat(b)
        assert_same(kept, history._entry_chat(a))
        assert history._kept_chat(b) is kept  # built once, kept
    run = Run(id="r", flow_id="f", step_id="s", started_at=datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(TypeError, match="Run is not frozen"):
        share_fields_sets([run])  # written in place by the engine: its set is its own


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]),
                          st.one_of(st.text(max_size=30), st.text(min_size=4001, max_size=4100))),
                max_size=8))
def test_chat_messages_kept_in_one_pass_are_those_built_on_first_use(
    made: list[tuple[Any, str]],
) -> None:
    """``keep_chat_messages`` leaves on each entry the very message ``_kept_chat`` would build
    on first use (long texts cut as the prompt cuts them), and none on a tool entry."""
    kept = [HistoryEntry(role=r, text=t) for r, t in made]
    fresh = [HistoryEntry(role=r, text=t) for r, t in made]
    history.keep_chat_messages(kept)
    for a, b in zip(kept, fresh, strict=True):
        if a.role == "tool":
            with pytest.raises(AttributeError):
                history._kept(a, HistoryEntry)
            continue
        message = history._kept(a, HistoryEntry)
        assert_same(message, history._entry_chat(b))
        assert history._kept_chat(a) is message  # served from the slot, not built again
