"""The JSON envelopes of the two model calls: schemas out, judgements in.

Every property is required and nullable, so the model must answer each one (null = "no
opinion"). Branch keys travel as short aliases (q1, q2, ...) because a run id is not a legal
property name; ``parse_understand`` maps them back to ``{run_id}/{step_id}/{index}``. A reply with
no usable JSON is an empty judgement: nothing the model says is applied before code checks it.

The schema is a request, not a guarantee: a provider may return anything, and a customer can
steer the model's reply with what they type. So the parsers keep only the names the call
offered, in every section, and list the others as *refused* (``section.name``) for the phase
to record as ``unknown-field``; a refused name is never written anywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from engine import strict_json
from engine.config import FieldSpec
from engine.providers.base import ModelResponse

_JSON_TYPES = {
    "string": "string",
    "number": "number",
    "integer": "integer",
    "boolean": "boolean",
    "date": "string",
    "datetime": "string",
    "email": "string",
}
_FORMATS = {"date": "date", "datetime": "date-time", "email": "email"}


def field_schema(spec: FieldSpec) -> dict[str, Any]:
    """A nullable JSON schema for one field's value."""
    schema: dict[str, Any] = {"type": [_JSON_TYPES[spec.type], "null"]}
    if spec.type in _FORMATS:
        schema["format"] = _FORMATS[spec.type]
    if spec.enum is not None:
        schema["enum"] = [*spec.enum, None]
    if spec.description or spec.ask:
        schema["description"] = spec.description or spec.ask
    return schema


def _object(properties: dict[str, Any], *, nullable: bool = False) -> dict[str, Any]:
    return {
        "type": ["object", "null"] if nullable else "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


@dataclass
class UnderstandPlan:
    """What the understand call must judge; empty sections are left out of the envelope."""

    flows: dict[str, list[str]] = field(default_factory=dict)
    mentions: dict[str, list[str]] = field(default_factory=dict)
    extract: dict[str, dict[str, FieldSpec]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)  # full id -> question
    fields: dict[str, FieldSpec] = field(default_factory=dict)
    # Known fields offered only because a candidate's clear_on_start would empty them: their
    # values land only when the run that clears them started.
    if_cleared: set[str] = field(default_factory=set)
    # Known correctable fields offered for a change (the floor run's flow collects them): a
    # new value replaces the old one with a ``corrected`` outcome.
    corrections: set[str] = field(default_factory=set)
    # The floor run's flow, when it is asking and scored beside others: what it waits for
    # (by flow id), so the model scores a bare answer ("wednesday") as that flow's.
    asking: dict[str, str] = field(default_factory=dict)

    def aliases(self) -> dict[str, str]:
        """alias (q1, q2, ...) -> full branch id, in branch order."""
        return {f"q{i}": full for i, full in enumerate(self.branches, start=1)}


def understand_schema(plan: UnderstandPlan) -> dict[str, Any]:
    """The understand envelope: only the sections with something to judge."""
    sections: dict[str, Any] = {}
    if plan.flows:
        sections["flows"] = _object(
            {f: {"type": ["integer", "null"], "minimum": 0, "maximum": 100} for f in plan.flows}
        )
    if plan.mentions:
        sections["mentions"] = _object({m: {"type": ["boolean", "null"]} for m in plan.mentions})
    if plan.extract:
        sections["extract"] = _object(
            {
                flow_id: _object({p: field_schema(s) for p, s in params.items()}, nullable=True)
                for flow_id, params in plan.extract.items()
            }
        )
    if plan.branches:
        sections["branches"] = _object(
            {alias: {"type": ["boolean", "null"]} for alias in plan.aliases()}
        )
    if plan.fields:
        sections["fields"] = _object({n: field_schema(s) for n, s in plan.fields.items()})
    return _object(sections)


def speak_schema(pending: dict[str, FieldSpec]) -> dict[str, Any]:
    """The speak envelope: ``{message, ...pending fields}``, all required and nullable."""
    properties: dict[str, Any] = {"message": {"type": ["string", "null"]}}
    for name, spec in pending.items():
        if name != "message":
            properties[name] = field_schema(spec)
    return _object(properties)


@dataclass
class Judgement:
    """The understand call's answers, keyed by real ids; absent or null means no opinion."""

    flows: dict[str, int] = field(default_factory=dict)
    mentions: dict[str, bool] = field(default_factory=dict)
    extract: dict[str, dict[str, Any]] = field(default_factory=dict)
    branches: dict[str, bool] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    usable: bool = True
    refused: list[str] = field(default_factory=list)  # "section.name" the call did not offer


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def reply_json(response: ModelResponse) -> dict[str, Any] | None:
    """The reply's JSON object: the parsed ``json``, else the first object found in ``text``."""
    if isinstance(response.json, dict):
        return response.json
    match = _OBJECT.search(response.text or "")
    if not match:
        return None
    try:
        value = strict_json.loads(match.group(0))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw.get(name)
    return value if isinstance(value, dict) else {}


_UNDERSTAND_SECTIONS = ("flows", "mentions", "extract", "branches", "fields")


def parse_understand(response: ModelResponse, plan: UnderstandPlan) -> Judgement:
    """Read the reply against the plan: names the plan did not offer are refused (never
    applied), wrong types are ignored, nulls mean no opinion."""
    raw = reply_json(response)
    if raw is None:
        return Judgement(usable=False)
    judgement = Judgement()
    refused = judgement.refused
    refused += [k for k, v in raw.items() if k not in _UNDERSTAND_SECTIONS and v is not None]
    for flow_id, score in _section(raw, "flows").items():
        if flow_id not in plan.flows:
            _refuse(refused, "flows", flow_id, score)
        elif isinstance(score, int) and not isinstance(score, bool):
            judgement.flows[flow_id] = max(0, min(100, score))
        elif isinstance(score, float) and math.isfinite(score):
            # NaN or an infinity (from a provider that decodes its own replies) is no score.
            judgement.flows[flow_id] = max(0, min(100, int(score)))
    for flow_id, said in _section(raw, "mentions").items():
        if flow_id not in plan.mentions:
            _refuse(refused, "mentions", flow_id, said)
        elif isinstance(said, bool):
            judgement.mentions[flow_id] = said
    for flow_id, values in _section(raw, "extract").items():
        if flow_id not in plan.extract:
            _refuse(refused, "extract", flow_id, values)
        elif isinstance(values, dict):
            offered = plan.extract[flow_id]
            for param, value in values.items():
                if param not in offered:
                    _refuse(refused, f"extract.{flow_id}", param, value)
            judgement.extract[flow_id] = {
                k: v for k, v in values.items() if k in offered and v is not None
            }
    aliases = plan.aliases()
    for alias, answer in _section(raw, "branches").items():
        if alias not in aliases:
            _refuse(refused, "branches", alias, answer)
        elif isinstance(answer, bool):
            judgement.branches[aliases[alias]] = answer
    for name, value in _section(raw, "fields").items():
        if name not in plan.fields:
            _refuse(refused, "fields", name, value)
        elif value is not None:
            judgement.fields[name] = value
    return judgement


def _refuse(refused: list[str], section: str, name: str, value: Any) -> None:
    """Note a name the call did not offer; a null is no opinion and needs no note."""
    if value is not None:
        refused.append(f"{section}.{name}")


def parse_speak(
    response: ModelResponse, offered: Collection[str] = ()
) -> tuple[str | None, dict[str, Any], list[str]]:
    """The reply's message, the values of the ``offered`` fields (None values dropped), and
    the names of the other non-null properties (refused, never written).

    Plain text without JSON is the message (a provider asked for none); text that opens like
    a JSON envelope or a code fence but does not parse is a broken reply, not a message, so it
    is never sent to the customer: no message, and the speak call fails like an empty one.
    """
    raw = reply_json(response)
    if raw is None:
        text = (response.text or "").strip()
        if text.startswith(("{", "```", "[")):
            return None, {}, []
        return (text or None), {}, []
    message = raw.get("message")
    values = {k: v for k, v in raw.items() if k != "message" and v is not None}
    refused = [k for k in values if k not in offered]
    kept = {k: v for k, v in values.items() if k in offered}
    said = message.strip() if isinstance(message, str) and message.strip() else None
    return said, kept, refused
