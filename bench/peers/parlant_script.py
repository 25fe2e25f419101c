"""The scripted server's answers to Parlant's calls: an instance of the call's JSON schema
(given by the Parlant runner under the schema class's name), filled the way a model that
understood the turn would fill it where the turn depends on it, and with the least valid value
elsewhere. Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

from bench.peers.conversations import CONVERSATIONS, final_reply, tool_for

__all__ = ["SCHEMAS", "instance", "reply"]

SCHEMAS: dict[str, dict[str, Any]] = {}
"""Parlant's schemas by class name, as the runner gave them."""


def _resolve(spec: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = spec.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return dict((root.get("$defs") or {}).get(ref.split("/")[-1]) or {})
    return spec


def instance(spec: dict[str, Any], root: dict[str, Any], depth: int = 0) -> Any:
    """The least valid value of ``spec``: required properties only, empty lists, the first
    enum value, null where null is allowed."""
    spec = _resolve(spec, root)
    if depth > 12:
        return None
    if "const" in spec:
        return spec["const"]
    if spec.get("enum"):
        return spec["enum"][0]
    if "default" in spec:
        return spec["default"]
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if isinstance(options, list) and options:
            if any(_resolve(o, root).get("type") == "null" for o in options):
                return None
            return instance(options[0], root, depth + 1)
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = "null" if "null" in kind else kind[0]
    if kind == "object" or "properties" in spec:
        props = spec.get("properties") or {}
        return {name: instance(props[name], root, depth + 1)
                for name in spec.get("required", list(props)) if name in props}
    return {"array": [], "string": "", "boolean": False, "integer": 0, "number": 0.0,
            "null": None}.get(str(kind), None)


GUIDELINE_KINDS = {
    "greets": ("greet", "name"),
    "has not given both": ("request",),
    "has given the service and the day": ("request", "change"),
    "confirms the booking": ("confirm",),
    "opening hours": ("hours",),
    "have paid": ("pay",),
}
"""Which turns each of the runner's guidelines applies to, by a phrase of its condition."""


def _prompt(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    return "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))


def _output_format(prompt: str) -> str:
    """The part of a Parlant prompt that shows the JSON to answer with."""
    at = prompt.rfind("OUTPUT FORMAT")
    return prompt[at:] if at >= 0 else prompt[-4000:]


def guideline_applies(condition: str, conversation: str, turn: int) -> bool:
    said = CONVERSATIONS[conversation][turn]
    for phrase, kinds in GUIDELINE_KINDS.items():
        if phrase in condition:
            if phrase == "has not given both":
                known = {**said.states}
                return said.kind == "request" and not (known.get("service") and known.get("day"))
            if phrase == "has given the service and the day":
                return said.kind == "change" or (
                    said.kind == "request" and bool(said.states.get("service"))
                    and bool(said.states.get("day")))
            return said.kind in kinds
    return False


def _checks(out: dict[str, Any], schema: dict[str, Any], prompt: str, conversation: str,
            turn: int) -> None:
    """A guideline-matching answer: one check per guideline the prompt lists, each boolean of
    it set to whether the guideline applies to this turn."""
    listed = re.findall(r'"guideline_id":\s*"([^"]+)",\s*"condition":\s*"([^"]*)"',
                        _output_format(prompt))
    item_spec = _resolve((schema.get("properties") or {}).get("checks") or {}, schema)
    item_spec = _resolve(item_spec.get("items") or {}, schema)
    checks = []
    for guideline_id, condition in listed:
        check = instance(item_spec, schema)
        check = check if isinstance(check, dict) else {}
        applies = guideline_applies(condition, conversation, turn)
        for name, spec in (item_spec.get("properties") or {}).items():
            if _resolve(spec, schema).get("type") == "boolean" or name == "applies":
                check[name] = applies
        check.update({"guideline_id": guideline_id, "condition": condition,
                      "rationale": "scripted"})
        checks.append(check)
    out["checks"] = checks


def _tool_batch(out: dict[str, Any], prompt: str, conversation: str, turn: int) -> None:
    """A tool-calling answer: the candidate tool called, with its arguments, when it is the
    turn's tool; else not called."""
    named = re.search(r'"name":\s*"([^"]+)"', _output_format(prompt))
    candidate = named.group(1) if named else ""
    out["name"] = candidate
    wanted = tool_for(conversation, turn)
    out["tool_calls_for_candidate_tool"] = []
    if wanted is None or candidate.split(":")[-1] != wanted[0]:
        return
    out["tool_calls_for_candidate_tool"] = [{
        "applicability_rationale": "scripted", "is_applicable": True,
        "argument_evaluations": [
            {"parameter_name": name, "acceptable_source_for_this_argument_according_to_its_"
             "tool_definition": "customer", "evaluate_is_it_provided_by_an_acceptable_source":
             "yes", "evaluate_was_it_already_provided_and_should_it_be_provided_again": "yes",
             "evaluate_is_it_potentially_problematic_to_guess_what_the_value_is_if_it_isnt_"
             "provided": "yes", "valid_invalid_or_missing": "valid",
             "value_as_string": str(value)}
            for name, value in wanted[1].items() if value is not None],
        "same_call_is_already_staged": False, "relevant_subtleties": "",
    }]


def reply(body: dict[str, Any], schema_name: str | None, conversation: str | None,
          turn: int | None) -> dict[str, Any]:
    """The JSON object answering one Parlant call: the schema's least valid instance, with
    what this turn decides where the call is about it."""
    schema = SCHEMAS.get(schema_name or "")
    if schema is None:
        return {}
    out = instance(schema, schema)
    out = out if isinstance(out, dict) else {}
    if conversation is None or turn is None:
        return out
    prompt = _prompt(body)
    props = schema.get("properties") or {}
    if "checks" in props:
        _checks(out, schema, prompt, conversation, turn)
    if "tool_calls_for_candidate_tool" in props:
        _tool_batch(out, prompt, conversation, turn)
    said = CONVERSATIONS[conversation][turn]
    for name in props:
        if name in ("response_body", "message", "revised_message", "draft"):
            out[name] = final_reply(conversation, turn)
        elif name in ("last_message_of_user", "last_customer_message"):
            out[name] = said.text
        elif name == "preamble":
            out[name] = "Sure."
    return out
