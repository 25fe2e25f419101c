"""Seed 000, phase 5 (Run): say, do, wait and if steps, movement, premises and caps, no call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engine import FakeClock, defer, failed, ok, skipped
from tests.scenarios.support import START, code_only_agent, codes, saved, texts


def starter(flow_id: str, steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A flow the host starts (no trigger)."""
    return {"id": flow_id, "steps": steps, **extra}


def start(flow_id: str = "f", key: str = "k1", **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "start": {"flow": flow_id, "key": key}, **extra}


async def test_say_goes_out_verbatim_with_its_key() -> None:
    """Say. The text goes to messages[] as kind: 'verbatim' with the pending afterMs."""
    agent, _, _ = code_only_agent([starter("f", [{"id": "oi", "say": "Olá!"}])])
    result = await agent.turn(start())
    (message,) = result.messages
    run_id = result.started[0].run_id
    assert (message.kind, message.text, message.key) == ("verbatim", "Olá!", f"{run_id}:oi:1")
    assert message.after_ms == 0 and result.llm_calls == 0


async def test_say_once_writes_a_claim() -> None:
    """once writes a claim; a repeat is code: 'already-sent'."""
    flow = starter("f", [{"id": "oi", "say": "Bem-vindo!", "once": True}, {"id": "b", "say": "Oi"}])
    agent, _, _ = code_only_agent([flow])
    first = await agent.turn(start())
    second = await agent.turn(start(key="k2", session=saved(first)))
    assert texts(first) == ["Bem-vindo!", "Oi"]
    assert texts(second) == ["Oi"] and "already-sent" in codes(second)
    assert second.llm_calls == 0


async def test_say_under_silenced_ends_the_run() -> None:
    """Under silenced the run ends code: 'silenced' (detail = your reason)."""
    agent, _, _ = code_only_agent([starter("f", [{"id": "oi", "say": "Olá!"}])])
    result = await agent.turn(start(silenced={"reason": "human took over"}))
    assert result.messages == []
    line = next(o for o in result.outcomes if o.code == "silenced")
    assert line.detail == "human took over"
    assert [(e.flow_id, e.reason) for e in result.ended] == [("f", "silenced")]
    assert result.llm_calls == 0


async def test_templates_render_data_context_and_input() -> None:
    """Templates: {{name}} renders data.name; {{context.x}}, {{input.x}}; a declared field with
    no value yet renders empty."""
    flow = starter("f", [{"id": "oi", "say": "{{nome}}|{{context.loja}}|{{input.x}}|{{idade}}"}])
    agent, _, _ = code_only_agent([flow])
    session = {"id": "s1", "data": {"nome": "Ana"}, "v": 4}
    result = await agent.turn(
        {
            "session_id": "s1",
            "start": {"flow": "f", "key": "k", "input": {"x": 7}},
            "context": {"loja": "Centro"},
            "session": session,
        }
    )
    assert texts(result) == ["Ana|Centro|7|"] and result.llm_calls == 0


async def test_do_runs_with_rendered_with_under_its_key() -> None:
    """Do. The action runs now, with with rendered against data, context and input, under
    key = ${runId}:${stepId}:${visit}."""
    seen: list[Any] = []

    def notify(ctx: Any) -> Any:
        seen.append((ctx.key, ctx.with_))
        return ok()

    flow = starter("f", [{"id": "n", "do": "notify", "with": {"to": "{{context.who}}", "n": 1}}])
    agent, _, _ = code_only_agent([flow], actions={"notify": notify})
    result = await agent.turn(start(context={"who": "ops"}))
    run_id = result.started[0].run_id
    assert seen == [(f"{run_id}:n:1", {"to": "ops", "n": 1})]
    assert "action-ok" in codes(result) and result.llm_calls == 0


async def test_do_ok_spoke_counts_as_an_answer() -> None:
    """{ ok } continues (spoke: true makes this run the one that answered)."""

    async def send(ctx: Any) -> Any:
        return ok(spoke=True, data={"nome": "Bia"})

    flow = {"id": "f", "on": [{"message": []}], "steps": [{"id": "s", "do": "send"}]}
    agent, _, _ = code_only_agent([flow], actions={"send": send})
    result = await agent.turn({"session_id": "s1", "message": "oi"})
    assert result.session.data == {"nome": "Bia"}
    assert result.messages == [] and result.llm_calls == 0  # the idle speaker stays quiet


async def test_do_skipped_and_failed_results() -> None:
    """{ skipped } continues (code: 'action-skipped'); { failed } takes onFail or continues
    (code: 'action-failed')."""
    flow = starter(
        "f",
        [
            {"id": "a", "do": "skip"},
            {"id": "b", "do": "fail", "on_fail": "recover"},
            {"id": "c", "say": "not reached"},
            {"id": "recover", "do": "fail_plain"},
            {"id": "d", "say": "continued"},
        ],
    )
    actions = {
        "skip": lambda ctx: skipped("nothing to do"),
        "fail": lambda ctx: failed("down"),
        "fail_plain": lambda ctx: {"failed": "again"},
    }
    agent, _, _ = code_only_agent([flow], actions=actions)
    result = await agent.turn(start())
    lines = [(o.code, o.step_id, o.detail) for o in result.outcomes if o.code.startswith("action")]
    assert lines == [
        ("action-skipped", "a", "nothing to do"),
        ("action-failed", "b", "down"),
        ("action-failed", "recover", "again"),
    ]
    assert texts(result) == ["continued"] and result.llm_calls == 0


async def test_do_thrown_error_is_action_failed() -> None:
    """A thrown error is code: 'action-failed', the error message in detail."""

    def boom(ctx: Any) -> Any:
        raise RuntimeError("crm timeout")

    flow = starter("f", [{"id": "a", "do": "boom"}, {"id": "b", "say": "seguimos"}])
    agent, _, _ = code_only_agent([flow], actions={"boom": boom})
    result = await agent.turn(start())
    line = next(o for o in result.outcomes if o.code == "action-failed")
    assert line.detail == "crm timeout" and texts(result) == ["seguimos"]
    assert result.llm_calls == 0


async def test_do_defer_reruns_the_same_step_with_the_same_key() -> None:
    """{ defer } parks the run under a new wake and re-runs the same step, same key, when it
    fires."""
    keys: list[str] = []

    def flaky(ctx: Any) -> Any:
        keys.append(ctx.key)
        return defer(ms=30_000) if len(keys) == 1 else ok()

    flow = starter("f", [{"id": "a", "do": "flaky"}, {"id": "b", "say": "feito"}])
    agent, _, clock = code_only_agent([flow], actions={"flaky": flaky})
    first = await agent.turn(start())
    (entry,) = first.schedule
    assert entry.at == clock.now() + timedelta(seconds=30)
    assert first.session.runs[0].status == "waiting" and first.messages == []
    clock.advance(30)
    second = await agent.turn({"session_id": "s1", "wake": entry.key, "session": saved(first)})
    assert keys[0] == keys[1] and texts(second) == ["feito"]
    assert second.llm_calls == 0


async def test_short_timer_rides_on_the_next_message() -> None:
    """Ten seconds or less, when the next step is a say or a talk step: the delay rides on that
    message as afterMs (code: 'inline-delay', detail: '3000ms')."""
    flow = starter(
        "f",
        [{"id": "a", "say": "Um"}, {"id": "w", "wait": {"ms": 3000}}, {"id": "b", "say": "Dois"}],
    )
    agent, _, _ = code_only_agent([flow])
    result = await agent.turn(start())
    assert [(m.text, m.after_ms) for m in result.messages] == [("Um", 0), ("Dois", 3000)]
    line = next(o for o in result.outcomes if o.code == "inline-delay")
    assert line.detail == "3000ms" and result.schedule == [] and result.llm_calls == 0


async def test_longer_timer_parks_and_schedules() -> None:
    """Anything else parks the run and adds { key, at } to schedule[]."""
    flow = starter("f", [{"id": "w", "wait": {"ms": 10_001}}, {"id": "b", "say": "Dois"}])
    agent, _, clock = code_only_agent([flow])
    result = await agent.turn(start())
    (entry,) = result.schedule
    run = result.session.runs[0]
    assert entry.key == f"{run.id}:w:1" and entry.at == clock.now() + timedelta(milliseconds=10_001)
    assert run.status == "waiting" and result.messages == [] and result.llm_calls == 0


async def test_short_timer_before_a_non_message_step_parks() -> None:
    """Ten seconds or less, when the next step is a say or a talk step: otherwise it parks."""
    flow = starter("f", [{"id": "w", "wait": {"ms": 1000}}, {"id": "n", "do": "noop"}])
    agent, _, _ = code_only_agent([flow], actions={"noop": lambda ctx: ok()})
    result = await agent.turn(start())
    assert len(result.schedule) == 1 and result.llm_calls == 0


async def test_business_hours_move_the_wake_to_the_next_open_minute() -> None:
    """with at moved forward to the next business hour when the step sets businessHours: true."""
    hours = {"tz": "America/Sao_Paulo", "days": {"mon": ["09:00", "18:00"]}, "holidays": []}
    flow = starter(
        "f",
        [{"id": "w", "wait": {"ms": 3_600_000}, "business_hours": True}, {"id": "b", "say": "x"}],
    )
    # Monday 20:30 in Sao Paulo: closed until next Monday 09:00 local (12:00 UTC).
    clock = FakeClock("2026-01-05T23:30:00Z")
    agent, _, _ = code_only_agent([flow], clock=clock, business_hours=hours)
    result = await agent.turn(start())
    assert result.schedule[0].at == datetime(2026, 1, 12, 12, 0, tzinfo=UTC)
    assert result.llm_calls == 0


async def test_if_takes_then_or_else_default_end() -> None:
    """If. then when the predicate holds, else else (default 'end')."""
    flow = starter(
        "f",
        [
            {"id": "check", "if": {"known": "nome"}, "then": "hello"},
            {"id": "hello", "say": "Olá {{nome}}"},
        ],
    )
    agent, _, _ = code_only_agent([flow])
    known = await agent.turn(start(session={"id": "s1", "v": 4, "data": {"nome": "Ana"}}))
    unknown = await agent.turn(start())
    assert texts(known) == ["Olá Ana"]
    assert unknown.messages == [] and [e.reason for e in unknown.ended] == ["completed"]
    assert known.llm_calls == unknown.llm_calls == 0


async def test_registered_condition_is_called_with_its_argument() -> None:
    """Conditions: a registered condition name calls conditions[name](ctx, arg)."""
    seen: list[Any] = []

    def in_stage(ctx: Any, stage: str) -> bool:
        seen.append(stage)
        return bool(ctx.context.get("stage") == stage)

    flow = starter(
        "f",
        [
            {"id": "c", "if": {"inStage": "lead"}, "then": "y", "else": "n"},
            {"id": "y", "say": "lead", "then": "end"},
            {"id": "n", "say": "other"},
        ],
    )
    agent, _, _ = code_only_agent([flow], conditions={"inStage": in_stage})
    result = await agent.turn(start(context={"stage": "lead"}))
    assert texts(result) == ["lead"] and seen == ["lead"] and result.llm_calls == 0


async def test_step_clear_move_forgets_fields() -> None:
    """A move is a step id, 'end', { step, clear } or { flow, input }."""
    flow = starter(
        "f",
        [
            {"id": "a", "if": {"known": "nome"}, "then": {"step": "b", "clear": ["nome"]}},
            {"id": "b", "say": "nome={{nome}}"},
        ],
    )
    agent, _, _ = code_only_agent([flow])
    result = await agent.turn(start(session={"id": "s1", "v": 4, "data": {"nome": "Ana"}}))
    assert texts(result) == ["nome="] and result.session.data == {} and result.llm_calls == 0


async def test_flow_move_starts_a_child_in_the_same_turn() -> None:
    """Then every live run is moved in turn; a child started by then: { flow } joins the
    queue."""
    parent = starter(
        "a", [{"id": "x", "say": "A", "then": {"flow": "b", "input": {"n": "{{nome}}"}}}]
    )
    child = starter("b", [{"id": "y", "say": "B {{input.n}}"}])
    agent, _, _ = code_only_agent([parent, child])
    result = await agent.turn(start("a", session={"id": "s1", "v": 4, "data": {"nome": "Ana"}}))
    assert texts(result) == ["A", "B Ana"]
    assert [s.flow_id for s in result.started] == ["a", "b"]
    assert result.session.runs == [] and result.llm_calls == 0


async def test_hop_limit() -> None:
    """Caps: 5 hops of flow-to-flow chaining (code: 'hop-limit')."""
    ping = starter("ping", [{"id": "x", "say": "ping", "then": {"flow": "pong"}}])
    pong = starter("pong", [{"id": "y", "say": "pong", "then": {"flow": "ping"}}])
    agent, _, _ = code_only_agent([ping, pong])
    result = await agent.turn(start("ping"))
    assert len(result.messages) == 6
    assert [e.reason for e in result.ended][-1] == "hop-limit"
    assert result.session.runs == [] and result.llm_calls == 0


async def test_step_loop() -> None:
    """Caps: 50 steps per run per turn (code: 'step-loop')."""
    flow = starter("f", [{"id": "a", "if": {"missing": "nome"}, "then": "a"}])
    agent, _, _ = code_only_agent([flow])
    result = await agent.turn(start())
    assert [e.reason for e in result.ended] == ["step-loop"]
    assert codes(result).count("if") == 50 and result.llm_calls == 0


async def test_premise_changed_ends_the_run() -> None:
    """Before a run moves, its premise is re-checked with this turn's context: while when the
    flow has one, otherwise the trigger's if. A false premise ends the run."""
    flow = starter(
        "f",
        [{"id": "w", "wait": {"ms": 60_000}}, {"id": "b", "say": "ainda aqui"}],
        when={"missing": "nome"},
    )
    agent, _, _ = code_only_agent([flow])
    first = await agent.turn(start())
    stored = saved(first)
    stored["data"] = {"nome": "Ana"}
    woke = await agent.turn({"session_id": "s1", "wake": first.schedule[0].key, "session": stored})
    assert [e.reason for e in woke.ended] == ["premise-changed"]
    assert woke.messages == [] and woke.llm_calls == 0


async def test_trigger_if_is_the_premise_without_when() -> None:
    """otherwise the trigger's if."""
    flow = {
        "id": "f",
        "on": [{"event": "go", "if": {"equals": {"plano": "pro"}}}],
        "steps": [{"id": "w", "wait": {"ms": 60_000}}, {"id": "b", "say": "x"}],
    }
    agent, _, _ = code_only_agent([flow], events={"go": {}}, fields={"plano": {"type": "string"}})
    session = {"id": "s1", "v": 4, "data": {"plano": "pro"}}
    first = await agent.turn({"session_id": "s1", "event": "go", "key": "e", "session": session})
    stored = saved(first)
    stored["data"] = {"plano": "basic"}
    woke = await agent.turn({"session_id": "s1", "wake": first.schedule[0].key, "session": stored})
    assert [e.reason for e in woke.ended] == ["premise-changed"] and woke.llm_calls == 0


async def test_flow_gone_and_step_gone() -> None:
    """A flow the agent no longer has ends the run with code: 'flow-gone'; a missing step,
    code: 'step-gone'."""
    old_flow = starter("f", [{"id": "w", "wait": {"ms": 60_000}}, {"id": "b", "say": "x"}])
    old, _, _ = code_only_agent([old_flow])
    first = await old.turn(start())
    key = first.schedule[0].key
    no_flow, _, _ = code_only_agent([starter("g", [{"id": "z", "say": "z"}])])
    gone = await no_flow.turn({"session_id": "s1", "wake": key, "session": saved(first)})
    assert [e.reason for e in gone.ended] == ["flow-gone"] and gone.llm_calls == 0
    renamed, _, _ = code_only_agent([starter("f", [{"id": "other", "say": "x"}])])
    missing = await renamed.turn({"session_id": "s1", "wake": key, "session": saved(first)})
    assert [e.reason for e in missing.ended] == ["step-gone"] and missing.llm_calls == 0


async def test_silence_run_ends_when_the_customer_wrote() -> None:
    """A silence-started run moved by a wake also ends when the customer has written since it
    started: code: 'customer-replied'."""
    nudge = {
        "id": "nudge",
        "on": [{"silence": 600_000}],
        "steps": [{"id": "w", "wait": {"ms": 60_000}}, {"id": "b", "say": "Oi?"}],
    }
    hello = {"id": "hello", "on": [{"message": []}], "steps": [{"id": "s", "say": "Olá"}]}
    agent, _, clock = code_only_agent([hello, nudge])
    first = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    (silence,) = first.schedule
    clock.set(silence.at)
    started = await agent.turn({"session_id": "s1", "wake": silence.key, "session": saved(first)})
    assert [s.flow_id for s in started.started] == ["nudge"]
    clock.advance(10)
    stored = saved(started)
    stored["last_user_at"] = clock.now().isoformat()
    clock.advance(60)
    timer = next(e for e in started.schedule if not e.key.startswith("silence:"))
    woke = await agent.turn({"session_id": "s1", "wake": timer.key, "session": stored})
    assert [e.reason for e in woke.ended] == ["customer-replied"]
    assert woke.messages == [] and woke.llm_calls == 0


async def test_question_step_asks_without_a_call() -> None:
    """A first step with a fixed question has no speak call."""
    flow = starter("f", [{"id": "q", "question": "Qual o seu nome?", "collect": ["nome"]}])
    agent, _, _ = code_only_agent([flow])
    result = await agent.turn(start())
    assert [(m.kind, m.text) for m in result.messages] == [("verbatim", "Qual o seu nome?")]
    assert result.session.runs[0].status == "asking" and result.llm_calls == 0


async def test_already_known_skips_the_talk_step() -> None:
    """A collect step with nothing pending is skipped with no call (code: 'already-known') and
    the run continues."""
    flow = starter("f", [{"id": "q", "collect": ["nome"]}, {"id": "b", "say": "Oi {{nome}}"}])
    agent, _, _ = code_only_agent([flow])
    result = await agent.turn(start(session={"id": "s1", "v": 4, "data": {"nome": "Ana"}}))
    assert "already-known" in codes(result) and texts(result) == ["Oi Ana"]
    assert result.llm_calls == 0


async def test_asking_run_does_not_respeak_on_an_event() -> None:
    """An asking run re-speaks only on a message, never on a wake or an event."""
    flow = starter("f", [{"id": "q", "question": "Nome?", "collect": ["nome"]}])
    agent, _, _ = code_only_agent([flow], events={"tick": {}})
    first = await agent.turn(start())
    event = await agent.turn(
        {"session_id": "s1", "event": "tick", "key": "e1", "session": saved(first)}
    )
    assert event.messages == [] and event.session.runs[0].status == "asking"
    assert event.llm_calls == 0


async def test_talk_under_silenced_ends_a_starting_run() -> None:
    """Under silenced, a resuming asker stays asking and any other run ends code: 'silenced'."""
    flow = starter("f", [{"id": "q", "collect": ["nome"]}])
    agent, _, _ = code_only_agent([flow])
    result = await agent.turn(start(silenced={"reason": "paused"}))
    assert [(e.reason) for e in result.ended] == ["silenced"]
    assert result.messages == [] and result.llm_calls == 0


async def test_silenced_message_keeps_the_asker_and_spends_nothing() -> None:
    """Under silenced nobody speaks and no call is made; a resuming asker stays asking."""
    flow = starter("f", [{"id": "q", "question": "Nome?", "collect": ["nome"]}])
    agent, _, _ = code_only_agent([flow])
    first = await agent.turn(start())
    quiet = await agent.turn(
        {
            "session_id": "s1",
            "message": "oi",
            "session": saved(first),
            "silenced": {"reason": "agent paused"},
        }
    )
    assert quiet.messages == [] and quiet.session.runs[0].status == "asking"
    assert quiet.llm_calls == 0


async def test_a_new_asker_suspends_the_old_one() -> None:
    """Otherwise every other asking run is suspended, this run becomes asking, and it is the
    turn's speaker."""
    first_flow = starter("a", [{"id": "q", "question": "Nome?", "collect": ["nome"]}])
    second_flow = {
        "id": "b",
        "on": [{"event": "ping"}],
        "steps": [{"id": "q2", "question": "Idade?", "collect": ["idade"]}],
    }
    agent, _, _ = code_only_agent([first_flow, second_flow], events={"ping": {}})
    first = await agent.turn(start("a"))
    second = await agent.turn(
        {"session_id": "s1", "event": "ping", "key": "e1", "session": saved(first)}
    )
    statuses = {r.flow_id: r.status for r in second.session.runs}
    assert statuses == {"a": "suspended", "b": "asking"}
    assert texts(second) == ["Idade?"] and second.llm_calls == 0


async def test_most_recently_suspended_returns_to_asking() -> None:
    """If no run is asking, the most recently suspended one returns to asking."""
    flows = [
        starter("a", [{"id": "q", "question": "Nome?", "collect": ["nome"]}]),
        starter("b", [{"id": "q", "question": "Idade?", "collect": ["idade"]}]),
        starter("c", [{"id": "w", "wait": {"ms": 60_000}}, {"id": "s", "say": "fim"}]),
    ]
    agent, _, _ = code_only_agent(flows)
    at = START
    session = {
        "id": "s1",
        "v": 4,
        "runs": [
            {
                "id": "r1",
                "flow_id": "a",
                "step_id": "q",
                "status": "suspended",
                "suspended_seq": 1,
                "started_at": at,
            },
            {
                "id": "r2",
                "flow_id": "b",
                "step_id": "q",
                "status": "suspended",
                "suspended_seq": 2,
                "started_at": at,
            },
            {
                "id": "r3",
                "flow_id": "c",
                "step_id": "w",
                "status": "waiting",
                "started_at": at,
                "waiting": {"key": "r3:w:1", "kind": "timer", "at": at},
            },
        ],
        "seq": 3,
    }
    woke = await agent.turn({"session_id": "s1", "wake": "r3:w:1", "session": session})
    statuses = {r.id: r.status for r in woke.session.runs}
    assert statuses == {"r1": "suspended", "r2": "asking"}
    assert texts(woke) == ["fim"] and woke.llm_calls == 0
