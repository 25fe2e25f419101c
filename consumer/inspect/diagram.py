"""An agent's flows as a diagram: steps, the moves between them, the triggers; and the path a
conversation took, highlighted.

``flow_graph(agent)`` reads the validated configuration into a small graph (nothing is run);
``svg(graph, path)`` draws it as a self-contained SVG (no script, no external reference, every
label escaped) and ``mermaid(graph, path)`` writes the same as Mermaid text for docs and code
review. ``path`` is the (flow, step) pairs in the order the conversation visited them
(``Reader.visited``): visited steps are filled, moves taken between consecutive ones are drawn
bold, and the last step is outlined.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape, quoteattr

__all__ = [
    "Edge", "FlowNode", "Graph", "StepNode", "condition_text", "flow_graph", "foreign_flows",
    "mermaid", "svg",
]

END = "end"


@dataclass(frozen=True)
class Edge:
    """A move from a step: to a step of the same flow, to another flow, or to the end."""

    label: str  # next, then, else, on_fail, on_correction, branch
    to_flow: str
    to_step: str | None  # None: the flow itself (its first step); END: the run ends


@dataclass
class StepNode:
    id: str
    kind: str  # say, do, wait, if, talk
    summary: str
    edges: list[Edge] = field(default_factory=list)


@dataclass
class FlowNode:
    id: str
    name: str | None
    triggers: list[str]
    steps: list[StepNode]


def foreign_flows(graph: Graph, path: list[tuple[str, str]]) -> list[str]:
    """The flows a conversation's path went through that ``graph``'s agent does not have (or
    the steps it has not): the drawing is of another agent than the one that answered."""
    out: list[str] = []
    for flow, step in path:
        if graph.step(flow, step) is None and flow not in out:
            out.append(flow)
    return out


@dataclass
class Graph:
    agent: str
    flows: list[FlowNode]

    def step(self, flow: str, step: str) -> StepNode | None:
        for f in self.flows:
            if f.id == flow:
                return next((s for s in f.steps if s.id == step), None)
        return None


def _get(value: Any, name: str, default: Any = None) -> Any:
    return getattr(value, name, default)


def condition_text(condition: Any) -> str:
    """A condition as a person reads it: ``known name``, ``service = brakes``, ``missing
    booking_ref``, ``not (...)``, joined by ``and``/``or``; anything else as compact JSON."""
    if isinstance(condition, dict) and len(condition) == 1:
        (op, value), = condition.items()
        names = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        if op in ("known", "missing"):
            return f"{op} {names}"
        if op in ("equals", "not_equals") and isinstance(value, dict):
            sign = "=" if op == "equals" else "≠"
            return " and ".join(
                f"{k} {sign} {json.dumps(v, ensure_ascii=False)}" for k, v in value.items())
        if op in ("all", "any") and isinstance(value, list):
            joiner = " and " if op == "all" else " or "
            return joiner.join(f"({condition_text(c)})" for c in value)
        if op == "not":
            return f"not ({condition_text(value)})"
    return json.dumps(condition, ensure_ascii=False, separators=(",", ":"), default=str)


def _trigger(trigger: Any) -> str:
    given = _get(trigger, "if_")
    condition = f" (if {condition_text(given)})" if given is not None else ""
    if _get(trigger, "message") is not None:
        words = _get(trigger, "message") or []
        return ("message: " + ", ".join(words[:4]) + (" …" if len(words) > 4 else "")
                if words else "any message") + condition
    if _get(trigger, "mention") is not None:
        return "mention: " + ", ".join(_get(trigger, "mention")[:4]) + condition
    if _get(trigger, "event") is not None:
        return f"event: {_get(trigger, 'event')}" + condition
    if _get(trigger, "silence") is not None:
        return f"silence: {_get(trigger, 'silence') / 1000:g} s" + condition
    return type(trigger).__name__


def _kind(step: Any) -> str:
    for kind in ("say", "do", "wait"):
        if _get(step, kind) is not None:
            return kind
    if _get(step, "if_") is not None and hasattr(step, "else_") and not hasattr(step, "wait"):
        return "if"
    return "talk"


def _summary(step: Any, kind: str) -> str:
    if kind == "say":
        return str(step.say)
    if kind == "do":
        return f"do {step.do}"
    if kind == "wait":
        wait = step.wait
        if _get(wait, "event") is not None:
            return f"wait for event {wait.event}"
        return f"wait {_get(wait, 'ms', 0) / 1000:g} s"
    if kind == "if":
        return "if " + condition_text(step.if_)
    collect = _get(step, "collect") or []
    return ("collect " + ", ".join(collect)) if collect else "talk"


def _target(move: Any, flow_id: str) -> tuple[str, str | None]:
    if isinstance(move, str):
        return (flow_id, END) if move == END else (flow_id, move)
    if _get(move, "flow") is not None:
        return (move.flow, None)
    return (flow_id, move.step)


def flow_graph(agent: Any) -> Graph:
    """The graph of an ``engine.Agent`` (or anything with its ``config``)."""
    config = agent.config
    flows = []
    for flow in config.flows:
        steps = []
        for index, step in enumerate(flow.steps):
            kind = _kind(step)
            node = StepNode(id=step.id, kind=kind, summary=_summary(step, kind))
            following = flow.steps[index + 1].id if index + 1 < len(flow.steps) else END
            then = _get(step, "then")
            if then is not None:
                node.edges.append(Edge("then", *_target(then, flow.id)))
            elif kind != "if":
                node.edges.append(Edge("next", flow.id, following))
            otherwise = _get(step, "else_")
            if otherwise is not None:
                node.edges.append(Edge("else", *_target(otherwise, flow.id)))
            elif kind == "if":
                node.edges.append(Edge("else", flow.id, following))
            for name in ("on_fail", "on_correction"):
                move = _get(step, name)
                if move is not None:
                    node.edges.append(Edge(name, *_target(move, flow.id)))
            for branch in _get(step, "branches") or []:
                node.edges.append(Edge("branch", *_target(branch.then, flow.id)))
            steps.append(node)
        flows.append(FlowNode(id=flow.id, name=flow.name,
                              triggers=[_trigger(t) for t in flow.on], steps=steps))
    return Graph(agent=config.name, flows=flows)


def _taken(path: list[tuple[str, str]]) -> set[tuple[tuple[str, str], tuple[str, str | None]]]:
    """Moves taken: consecutive visited steps (a move into a flow reaches its first step)."""
    out: set[tuple[tuple[str, str], tuple[str, str | None]]] = set()
    for a, b in itertools.pairwise(path):
        out.add((a, b))
        if a[0] != b[0]:
            out.add((a, (b[0], None)))
    return out


# -- SVG ------------------------------------------------------------------------------------------

COLUMN = 280
BOX_W = 190
BOX_H = 40
GAP = 30
TOP = 70
LEFT = 20
RIGHT = 110


def _clip(text: str, limit: int = 30) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


SVG_STYLE = (
    ".step rect{fill:#fff;stroke:#8a94a6;stroke-width:1}"
    ".step.visited rect{fill:#fde68a;stroke:#b45309;stroke-width:2}"
    ".step.current rect{stroke:#dc2626;stroke-width:3}"
    ".flow rect{fill:#e0e7ff;stroke:#4f46e5}"
    ".flow.visited rect{fill:#c7d2fe}"
    "svg.flows text{font:12px sans-serif;fill:#111}"
    "svg.flows text.small{font-size:10px;fill:#555}"
    ".edge{fill:none;stroke:#9ca3af;stroke-width:1.2}"
    ".edge.taken{stroke:#b45309;stroke-width:3}"
    "svg.flows text.label{font-size:9px;fill:#6b7280}"
)
"""The diagram's styles: inside a standalone SVG, or served as a stylesheet beside a page
(whose Content-Security-Policy allows no inline style)."""


def svg(
    graph: Graph, path: list[tuple[str, str]] | None = None, *, standalone: bool = True
) -> str:
    """The graph as an SVG document; ``path`` highlighted. ``standalone`` includes the styles
    (a file); a page links ``SVG_STYLE`` as a stylesheet instead."""
    path = path or []
    visited = set(path)
    last = path[-1] if path else None
    taken = _taken(path)
    where: dict[tuple[str, str | None], tuple[float, float]] = {}
    for column, flow in enumerate(graph.flows):
        left = float(LEFT + column * COLUMN)
        where[(flow.id, None)] = (left, 20.0)
        for row, step in enumerate(flow.steps):
            where[(flow.id, step.id)] = (left, float(TOP + row * (BOX_H + GAP)))
    tallest = max((len(f.steps) for f in graph.flows), default=0)
    # room on the right for the curves and labels that leave the last column's boxes
    width = LEFT * 2 + max(2, len(graph.flows)) * COLUMN + RIGHT
    height = TOP + tallest * (BOX_H + GAP) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="flows" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label={quoteattr("flows of " + graph.agent)}>',
        f"<style>{SVG_STYLE}</style>" if standalone else "",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        '<path d="M0,0L10,5L0,10z" fill="#6b7280"/></marker></defs>',
    ]
    if not graph.flows:
        parts.append(f'<text class="empty" x="{LEFT}" y="40">{escape(graph.agent)} has no flows: '
                     "every message is answered by the agent's idle reply</text>")
    edges: list[str] = []
    for flow in graph.flows:
        fx, fy = where[(flow.id, None)]
        flow_visited = any(f == flow.id for f, _ in visited)
        triggers = "; ".join(flow.triggers) or "started by a move"
        parts.append(
            f'<g class="flow{" visited" if flow_visited else ""}" '
            f'data-flow={quoteattr(flow.id)}><title>{escape(flow.name or flow.id)}: '
            f"{escape(triggers)}</title>"
            f'<rect x="{fx}" y="{fy}" width="{BOX_W}" height="34" rx="6"/>'
            f'<text x="{fx + 8}" y="{fy + 14}">{escape(_clip(flow.name or flow.id))}</text>'
            f'<text class="small" x="{fx + 8}" y="{fy + 28}">{escape(_clip(triggers, 36))}</text>'
            "</g>"
        )
        for step in flow.steps:
            x, y = where[(flow.id, step.id)]
            classes = "step"
            if (flow.id, step.id) in visited:
                classes += " visited"
            if last == (flow.id, step.id):
                classes += " current"
            parts.append(
                f'<g class="{classes}" data-step={quoteattr(flow.id + "/" + step.id)}>'
                f"<title>{escape(flow.id)}/{escape(step.id)} ({step.kind}): "
                f"{escape(step.summary)}</title>"
                f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="4"/>'
                f'<text x="{x + 8}" y="{y + 16}">{escape(_clip(step.id, 26))} '
                f'<tspan class="small">{step.kind}</tspan></text>'
                f'<text class="small" x="{x + 8}" y="{y + 31}">{escape(_clip(step.summary))}'
                "</text></g>"
            )
            for n, edge in enumerate(step.edges):
                edges.append(_edge_svg(flow.id, step.id, edge, n, where, taken))
    parts.extend(edges)
    parts.append("</svg>")
    return "".join(parts)


def _edge_svg(
    flow: str, step: str, edge: Edge, n: int,
    where: dict[tuple[str, str | None], tuple[float, float]],
    taken: set[tuple[tuple[str, str], tuple[str, str | None]]],
) -> str:
    sx, sy = where[(flow, step)]
    is_taken = ((flow, step), (edge.to_flow, edge.to_step)) in taken
    css = "edge taken" if is_taken else "edge"
    data = f'data-from={quoteattr(flow + "/" + step)} data-to=' + quoteattr(
        edge.to_flow + "/" + (edge.to_step or "")
    )
    if edge.to_step == END:
        # each move to the end of one step has its own stub and label, side by side
        x1, y1 = sx + 24 + 62 * n, sy + BOX_H
        return (f'<g {data}><path class="{css}" d="M{x1},{y1} l0,10" />'
                f'<text class="label" x="{x1 + 4}" y="{y1 + 12}">{escape(edge.label)}: end'
                "</text></g>")
    target = where.get((edge.to_flow, edge.to_step))
    if target is None:
        return ""
    tx, ty = target
    if edge.to_flow == flow and edge.label == "next":
        x1 = sx + BOX_W / 2
        return (f'<g {data}><path class="{css}" d="M{x1},{sy + BOX_H} L{x1},{ty}" '
                'marker-end="url(#arrow)"/></g>')
    if edge.to_flow == flow:
        bend = 18 + 10 * n
        x1, y1 = sx + BOX_W, sy + BOX_H / 2 + 4 * n - 4
        y2 = ty + BOX_H / 2
        if (tx, ty) == (sx, sy + BOX_H + GAP) and edge.label in ("then", "else"):
            x1 = sx + BOX_W / 2 + 20 * (n + 1)
            return (f'<g {data}><path class="{css}" d="M{x1},{sy + BOX_H} L{x1},{ty}" '
                    f'marker-end="url(#arrow)"/><text class="label" x="{x1 + 3}" '
                    f'y="{sy + BOX_H + 12}">{escape(edge.label)}</text></g>')
        return (f'<g {data}><path class="{css}" d="M{x1},{y1} C{x1 + bend * 2},{y1} '
                f'{tx + BOX_W + bend * 2},{y2} {tx + BOX_W},{y2}" marker-end="url(#arrow)"/>'
                f'<text class="label" x="{x1 + 3}" y="{y1 - 3}">{escape(edge.label)}</text></g>')
    # to another flow's header
    x1, y1 = sx + BOX_W, sy + BOX_H / 2
    x2, y2 = (tx, ty + 17) if tx > sx else (tx + BOX_W, ty + 17)
    return (f'<g {data}><path class="{css}" d="M{x1},{y1} C{x1 + 30},{y1} {x2 - 30},{y2} '
            f'{x2},{y2}" marker-end="url(#arrow)"/><text class="label" x="{x1 + 3}" '
            f'y="{y1 - 3}">{escape(edge.label)} → {escape(edge.to_flow)}</text></g>')


# -- Mermaid --------------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def _node(flow: str, step: str | None) -> str:
    return "n_" + _UNSAFE.sub("_", flow) + "__" + _UNSAFE.sub("_", step or "start")


def _mermaid_text(text: str) -> str:
    """A label Mermaid shows as text: quotes and markup characters as HTML entities."""
    return escape(_clip(text, 40), {'"': "&quot;", "|": "&#124;", "`": "&#96;"})


def mermaid(graph: Graph, path: list[tuple[str, str]] | None = None) -> str:
    """The graph as a Mermaid flowchart; ``path`` highlighted with a ``visited`` class."""
    path = path or []
    taken = _taken(path)
    lines = ["flowchart TD"]
    links: list[tuple[str, bool]] = []
    for flow in graph.flows:
        title = _mermaid_text(flow.name or flow.id)
        lines.append(f'  subgraph {_node(flow.id, None)}_g["{title}"]')
        triggers = "; ".join(flow.triggers) or "started by a move"
        lines.append(f'    {_node(flow.id, None)}(["{_mermaid_text(triggers)}"])')
        for step in flow.steps:
            lines.append(
                f'    {_node(flow.id, step.id)}["{_mermaid_text(step.id)}: '
                f'{_mermaid_text(step.summary)}"]'
            )
        lines.append("  end")
        if flow.steps:
            links.append((f"  {_node(flow.id, None)} --> {_node(flow.id, flow.steps[0].id)}",
                          bool(path and path[0] == (flow.id, flow.steps[0].id))))
        for step in flow.steps:
            for edge in step.edges:
                if edge.to_step == END:
                    target = f"{_node(flow.id, step.id)}_end(((end)))"
                else:
                    target = _node(edge.to_flow, edge.to_step)
                arrow = "-->" if edge.label == "next" else f"-- {edge.label} -->"
                links.append((f"  {_node(flow.id, step.id)} {arrow} {target}",
                              ((flow.id, step.id), (edge.to_flow, edge.to_step)) in taken))
    lines.extend(link for link, _ in links)
    lines.append("  classDef visited fill:#fde68a,stroke:#b45309,stroke-width:2px")
    visited = sorted({_node(f, s) for f, s in path})
    if visited:
        lines.append(f"  class {','.join(visited)} visited")
    for index, (_, is_taken) in enumerate(links):
        if is_taken:
            lines.append(f"  linkStyle {index} stroke:#b45309,stroke-width:3px")
    return "\n".join(lines) + "\n"
