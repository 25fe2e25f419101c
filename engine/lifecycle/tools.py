"""The built-in tools the speak call may be offered: handoff, set_state, search_knowledge,
complete_task, web_search (each off unless the agent's lifecycle enables it), and load_skill and
the goal tools (offered while there is a skill to load or a goal to pursue).

The model only asks; code checks and acts. ``handoff`` records a hand-off that Settle applies
(reasons: user_requested, cannot_help, out_of_scope, sensitive, other; a tag only from the
configured list). ``set_state`` goes through ``lifecycle.state`` (an error and nothing saved
when a limit is hit). ``search_knowledge`` quotes excerpts found by code (``knowledge``: the
agent's own sources, or with none the whole Knowledge Base) and
remembers them for provenance and the link check. ``complete_task`` hands outputs back to the
host on ``TurnResult.task_result`` and finishes the speaking run's task. Offered when:
``handoff`` needs ``escalation`` on too, ``search_knowledge`` something to search (the agent's
documents, or with none the workspace's index), ``complete_task`` a run speaking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.config import Tool
from engine.lifecycle import goals, knowledge, skills, web_search
from engine.lifecycle.goals import GOAL_TOOLS
from engine.lifecycle.results import HandoffNotice, TaskResult
from engine.lifecycle.settings import HANDOFF_REASONS
from engine.lifecycle.skills import LOAD_SKILL
from engine.lifecycle.state import set_state
from engine.providers.base import ToolCall, ToolSpec

if TYPE_CHECKING:
    from engine.lifecycle.turn import LifecycleTurn
    from engine.session import Run
    from engine.state import TurnState

NAMES = (
    "handoff", "set_state", "search_knowledge", "complete_task", "web_search", LOAD_SKILL,
    *GOAL_TOOLS,
)


def _engine_only(*_: Any) -> Any:
    raise RuntimeError("built-in tools are run by the engine, not through a handler")


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _spec(name: str, turn: LifecycleTurn) -> ToolSpec:
    if name == "handoff":
        tags = turn.settings.handoff_rules.tags
        properties: dict[str, Any] = {
            "reason": {"type": "string", "enum": list(HANDOFF_REASONS)},
            "summary": {"type": "string", "description": "What the human needs to know."},
        }
        if tags:
            properties["tag"] = {"type": ["string", "null"], "enum": [*tags, None]}
        return ToolSpec(
            name=name,
            description="Hand the conversation to a human, with a reason and a summary.",
            parameters=_schema(properties, list(properties)),
        )
    if name == "set_state":
        return ToolSpec(
            name=name,
            description="Remember a fact for the rest of the conversation (key, value).",
            parameters=_schema(
                {"key": {"type": "string"}, "value": {"type": "string"}}, ["key", "value"]
            ),
        )
    if name == "search_knowledge":
        return ToolSpec(
            name=name,
            description="Search the knowledge base and FAQ; returns the best excerpts.",
            parameters=_schema({"query": {"type": "string"}}, ["query"]),
        )
    if name == "web_search":
        return ToolSpec(
            name=name,
            description="Search the web; returns up to 5 results (title, url, snippet).",
            parameters=_schema({"query": {"type": "string"}}, ["query"]),
        )
    if name == LOAD_SKILL:
        names = [s.name for s in skills.unloaded_selectable(turn)]
        listing = "; ".join(f"{s.name}: {s.description}" for s in skills.unloaded_selectable(turn))
        return ToolSpec(
            name=name,
            description=f"Load one more skill and read its text. Skills: {listing}",
            parameters=_schema({"name": {"type": "string", "enum": names}}, ["name"]),
        )
    if name == goals.SUBMIT:
        return ToolSpec(
            name=name,
            description="Submit answers for the active goal; bad ones come back as errors.",
            parameters=_schema({"answers": {"type": "object"}}, ["answers"]),
        )
    if name == goals.COMPLETE:
        return ToolSpec(
            name=name,
            description="Finish the active goal once every field is answered.",
            parameters=_schema({}, []),
        )
    return ToolSpec(
        name=name,
        description="Finish the current task and return its outputs.",
        parameters=_schema({"outputs": {"type": "object"}}, ["outputs"]),
    )


_TOOL = Tool(description="built-in", handler=_engine_only)


def offer(
    state: TurnState, turn: LifecycleTurn, run: Run | None
) -> list[tuple[str, Tool, ToolSpec]]:
    """The built-in tools this speak call is offered, as ``(name, tool, spec)``."""
    settings = turn.settings
    goal = goals.active(turn)
    source = settings.web_search
    searchable = source is not None and source.enabled
    names = [n for n in settings.tools.enabled() if n != "web_search" or searchable]
    out = []
    for name in names:
        if name == "handoff" and not settings.escalation:
            continue  # offered when tools.handoff is on *and* escalation is enabled
        if name == "search_knowledge" and not knowledge.searchable(settings):
            continue  # no sources of its own and no workspace index: nothing to search
        if name == "complete_task" and (run is None or goal is not None):
            continue  # the idle speaker has no task; a skill goal replaces the task
        out.append((name, _TOOL, _spec(name, turn)))
    if skills.unloaded_selectable(turn):
        out.append((LOAD_SKILL, _TOOL, _spec(LOAD_SKILL, turn)))
    if goal is not None:
        out += [(name, _TOOL, _spec(name, turn)) for name in GOAL_TOOLS]
    return out


async def call(state: TurnState, turn: LifecycleTurn, run: Run | None, tool_call: ToolCall) -> Any:
    """Run one built-in tool call; the result goes back to the model."""
    args = dict(tool_call.arguments)
    name = tool_call.name
    if name == "set_state":
        update = set_state(turn.memory.state, args.get("key"), args.get("value"))
        if update.error is not None:
            return {"error": update.error}
        turn.memory.state = update.state
        return {"ok": True, "saved": args.get("key")}
    if name == "search_knowledge":
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return {"error": "query is required"}
        hits = await knowledge.search_for(turn.settings, query)
        turn.found.extend(hits)
        if hits:
            turn.usage.knowledge_found += 1
        if not hits:
            return {"excerpts": [], "note": "nothing found"}
        return {
            "excerpts": [
                {"type": h.type, "title": h.title, "url": h.url, "text": h.text} for h in hits
            ]
        }
    if name == "handoff":
        return _handoff(turn, args)
    if name == "web_search":
        return await _web_search(turn, args)
    if name == LOAD_SKILL:
        skill = args.get("name")
        problem = skills.load_asked(turn, skill) if isinstance(skill, str) else "name is required"
        if problem is not None:
            return {"error": problem}
        return {"ok": True, "skill": skill, "text": skills.by_name(turn)[str(skill)].text}
    if name == goals.SUBMIT:
        return goals.submit(turn, args)
    if name == goals.COMPLETE:
        return goals.complete(turn, run)
    if name == "complete_task":
        outputs = args.get("outputs")
        if not isinstance(outputs, dict):
            return {"error": "outputs must be an object"}
        turn.task = TaskResult(
            outputs=outputs, run_id=run.id if run else None, flow_id=run.flow_id if run else None
        )
        return {"ok": True}
    return {"error": f"unknown built-in tool {name!r}"}


async def _web_search(turn: LifecycleTurn, args: dict[str, Any]) -> Any:
    source = turn.settings.web_search
    query = args.get("query")
    if source is None:
        return {"error": "web search is not available"}
    if not isinstance(query, str) or not query.strip():
        return {"error": "query is required"}
    if turn.memory.web_searches >= source.max_per_conversation:
        return {"error": web_search.LIMIT_ERROR}
    try:
        found = await source.backend.search(
            query, limit=web_search.MAX_RESULTS, allowed_domains=list(source.allowed_domains)
        )
    except web_search.DailyLimitReached:
        return {"error": web_search.DAILY_LIMIT_ERROR}
    except Exception as exc:  # the model reads the failure and answers without the web
        return {"error": f"web search failed ({type(exc).__name__})"}
    turn.memory.web_searches += 1
    results = web_search.limit_results(found, source.allowed_domains)
    if not results:
        return {"results": [], "note": "nothing found"}
    turn.usage.web_results += 1
    turn.web_found.extend(results)
    return {"results": [{"title": r.title, "url": r.url, "snippet": r.snippet} for r in results]}


def _handoff(turn: LifecycleTurn, args: dict[str, Any]) -> Any:
    reason = args.get("reason")
    if reason not in HANDOFF_REASONS:
        return {"error": f"reason must be one of {', '.join(HANDOFF_REASONS)}"}
    rules = turn.settings.handoff_rules
    tag = args.get("tag")
    if tag is not None and tag not in rules.tags:
        return {"error": f"tag must be one of {', '.join(rules.tags) or 'none'}"}
    summary = args.get("summary")
    turn.handoff_requested = HandoffNotice(
        reason=str(reason),
        summary=summary if isinstance(summary, str) else "",
        tag=tag if tag is not None else rules.tag,
        by="tool",
    )
    return {"ok": True, "handed_off": True}


def finish_task(state: TurnState, run: Run) -> bool:
    """Settle: end the speaking run whose task ``complete_task`` finished; True when it did."""
    turn = state.lifecycle if state.config.lifecycle is not None else None
    if turn is None or turn.task is None or turn.task.run_id != run.id:
        return False
    state.end_run(run, "task_completed")
    return True
