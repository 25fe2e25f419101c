"""Phase 3, Understand: at most one model call that reads the customer's message.

Code first works out what there is to judge (candidates, mentions, branches, fields), then
takes one of three zero-call shortcuts when it can: nothing to judge; a lone eligible flow
with nobody on the floor, no catch-all and a silent idle speaker; a floor holder with nothing
to compare. Otherwise one ``understand`` call, which also offers the floor run's known
``correctable`` fields for a change (never a reason to call on its own). A reply with no usable
JSON (cut off at the token cap, not JSON, a provider's ``UnusableReply``) is logged and read as
an empty judgement; the call still counts. A provider failure raises ``ProviderError``: nothing
ran, nothing is saved, the host retries the input.
"""

from __future__ import annotations

import logging

from engine.collect import pending, refuse
from engine.compaction import summarize
from engine.config import FieldSpec, Flow, MessageTrigger, TalkStep
from engine.envelopes import Judgement, parse_understand, understand_schema
from engine.errors import MockExhausted, ProviderError, UnusableReply
from engine.prompt import build_understand
from engine.providers.base import ModelRequest
from engine.starts import blocked, repeat_blocked
from engine.state import Candidates, TurnState
from engine.values import is_known

log = logging.getLogger(__name__)


async def run(state: TurnState) -> None:
    """Plan the judgement; make the call unless a shortcut applies."""
    if state.done or not state.is_message:
        return
    silenced = state.request.silenced
    if silenced is not None and not silenced.understand:
        return
    found = plan(state)
    state.candidates = found
    if not found.worth:
        return
    provider = state.config.provider
    if provider is None:
        raise ProviderError("the agent has no provider", kind="fatal")
    await summarize(state)
    built = build_understand(state, found.plan)
    request = ModelRequest(
        schema_name="understand",
        system=built.system,
        messages=built.messages,
        json_schema=understand_schema(found.plan),
        meta=built.meta,
        turn_sections_at=built.turn_sections_at,
        prefix=built.prefix,
        conversation=state.session.id,
    )
    state.llm_calls += 1
    try:
        response = await provider.generate(request)
    except UnusableReply:
        # Answered, but nothing in it can be read: the same as a reply without JSON. Retrying
        # would only ask again for what a model at temperature 0 answers the same way.
        state.outcome("unparsed-reply", detail="understand")
        state.judgement = Judgement()
        return
    except (ProviderError, MockExhausted):
        raise
    except Exception as exc:  # any other provider failure is retryable, and still raised here
        raise ProviderError(f"understand call failed: {exc}", kind="retryable") from exc
    judgement = parse_understand(response, found.plan)
    refuse(state, "understand", judgement.refused)
    if not judgement.usable:
        log.warning("understand: the reply has no usable JSON; read as an empty judgement")
        state.outcome("unparsed-reply", detail="understand")
        judgement = Judgement()
    state.judgement = judgement


def _collects(flow: Flow) -> list[str]:
    names: list[str] = []
    for step in flow.steps:
        if isinstance(step, TalkStep):
            names += [n for n in step.collect if n not in names]
    return names


def _anywhere(state: TurnState, flow: Flow) -> dict[str, FieldSpec]:
    fields = state.config.fields
    return {
        n: fields[n]
        for n in _collects(flow)
        if fields[n].extract == "anywhere" and not is_known(state.session.data, n)
    }


def _cleared(state: TurnState, flow: Flow) -> dict[str, FieldSpec]:
    """Known extract-anywhere fields the flow's ``clear_on_start`` would empty if it started:
    unknown again by the time the judgement's values land, so the call may read them too."""
    fields = state.config.fields
    return {
        n: fields[n]
        for n in _collects(flow)
        if n in flow.clear_on_start
        and fields[n].extract == "anywhere"
        and is_known(state.session.data, n)
    }


def plan(state: TurnState) -> Candidates:
    """Work out candidates, mentions, branches and fields, and whether a call is worth it."""
    config = state.config
    found = Candidates()
    if state.floor_taken:
        floor = state.live(state.floor_run_id) if state.floor_run_id else None
    else:
        floor = state.asker()
    found.floor = floor
    floor_flow = state.flow(floor.flow_id) if floor else None
    if not state.floor_taken:
        for flow, index, trigger in config.message_triggers:
            if floor_flow is not None and flow.id == floor_flow.id:
                continue
            if trigger.message:
                if state.holds(trigger.if_) and not repeat_blocked(state, flow):
                    found.eligible.append((flow, index))
            elif (
                found.catch_all is None
                and blocked(state, flow, trigger.if_, allow_live=True) is None
            ):
                found.catch_all = (flow, index)
    mentions_to_judge: dict[str, list[str]] = {}
    for flow, _, mention in config.mention_triggers:
        if mention.mention and repeat_blocked(state, flow) is None:
            mentions_to_judge[flow.id] = list(mention.mention)
            if mention.extract:
                found.plan.extract[flow.id] = dict(mention.extract)
    found.plan.mentions = mentions_to_judge
    lone_ok = (
        floor is None
        and len(found.eligible) == 1
        and found.catch_all is None
        and config.idle_silent
    )
    scoring = bool(found.eligible) and not lone_ok and not state.floor_taken
    if lone_ok:
        found.lone = found.eligible[0]
    if scoring:
        if floor_flow is not None:
            found.plan.flows[floor_flow.id] = _phrases(floor_flow)
        for flow, _ in found.eligible:
            found.plan.flows[flow.id] = _phrases(flow)
    worth_fields: dict[str, FieldSpec] = {}
    if floor is not None and floor.status == "asking" and floor_flow is not None:
        step = floor_flow.step(floor.step_id)
        if isinstance(step, TalkStep):
            waiting = pending(state, floor, step)
            if waiting and floor_flow.id in found.plan.flows:
                found.plan.asking[floor_flow.id] = _waits_for(state, waiting)
            for index, branch in enumerate(step.branches):
                if branch.when:
                    found.plan.branches[f"{floor.id}/{step.id}/{index}"] = branch.when
            if step.question:
                for name in waiting:
                    worth_fields[name] = config.fields[name]
    if floor_flow is not None:
        worth_fields.update(_anywhere(state, floor_flow))
    for flow, _ in found.eligible:
        worth_fields.update(_anywhere(state, flow))
    extra_fields: dict[str, FieldSpec] = {}
    if floor is None and found.catch_all is not None:
        catch_flow = found.catch_all[0]
        first = next((s for s in catch_flow.steps if isinstance(s, TalkStep)), None)
        first_fields = set(first.collect) if first is not None and not first.question else set()
        for name, spec in _anywhere(state, catch_flow).items():
            if name in first_fields:
                extra_fields[name] = spec
            else:
                worth_fields[name] = spec
    found.worth = bool(found.plan.flows or found.plan.mentions or found.plan.branches)
    found.worth = found.worth or bool(worth_fields)
    if found.worth:
        starting = [flow for flow, _ in found.eligible]
        if floor is None and found.catch_all is not None:
            starting.append(found.catch_all[0])
        cleared: dict[str, FieldSpec] = {}
        for flow in starting:
            cleared.update(_cleared(state, flow))
        found.plan.fields = {**worth_fields, **extra_fields, **cleared}
        found.plan.if_cleared = set(cleared)
        if floor_flow is not None:
            # Only now that a call is made anyway: a correction never costs a call.
            correctable = _correctable(state, floor_flow, found.plan.fields)
            found.plan.fields.update(correctable)
            found.plan.corrections = set(correctable)
    return found


def _waits_for(state: TurnState, names: list[str]) -> str:
    """What an asking step waits for, as the understand prompt names it: each pending field by
    name, with its question when its ``ask`` is one. Without it a small model scores a bare
    answer ("wednesday" after another flow's reply) as whichever topic came last."""
    fields = state.config.fields
    said = [
        f"{n} ({ask})" if (ask := (fields[n].ask or "").strip()).endswith("?") else n
        for n in names
    ]
    return ", ".join(said)


def _correctable(
    state: TurnState, flow: Flow, offered: dict[str, FieldSpec]
) -> dict[str, FieldSpec]:
    """Known correctable fields the flow collects, not offered for another reason."""
    fields = state.config.fields
    return {
        n: fields[n]
        for n in _collects(flow)
        if fields[n].correctable and n not in offered and is_known(state.session.data, n)
    }


def _phrases(flow: Flow) -> list[str]:
    for trigger in flow.on:
        if isinstance(trigger, MessageTrigger):
            return list(trigger.message)
    return []
