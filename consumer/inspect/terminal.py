"""The inspector's views for a terminal: a conversation turn by turn, and the list.

Plain text, one turn as a block: the input, then ``understood``, ``decided``, ``sent`` and
``timers`` lines. Colour (ANSI) only when asked for, which the command does only when its
output is a terminal and ``NO_COLOR`` is unset. Customer text is printed with its control
characters made visible, so a message cannot move the cursor or recolour the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from consumer.inspect.view import ConversationView, ListItem, TurnView

__all__ = [
    "conversation_text", "dead_letter_line", "dead_letters_text", "list_text", "safe",
    "search_text",
]

_STYLES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


class _Paint:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, style: str, text: str) -> str:
        if not self.colour:
            return text
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m"


def safe(text: Any) -> str:
    """``text`` with control characters (escape sequences, carriage returns, newlines) shown
    as escapes: nothing from a record reaches the terminal as a control."""
    out = []
    for ch in str(text):
        if ch == "\n":
            out.append("⏎ ")
        elif ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029\u202e\u2066\u2067":
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def _time(value: datetime | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if value.utcoffset() is None:
        return str(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def _parsed(value: str) -> datetime | str:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return safe(value)


def _compact(value: Any) -> str:
    return safe(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))


def conversation_text(view: ConversationView, *, colour: bool = False) -> str:
    paint = _Paint(colour)
    out = [
        paint("bold", f"conversation {safe(view.session_id)}")
        + f" · {view.turns_total} turns · started {_time(view.created_at)}"
        + f" · last activity {_time(view.updated_at)}"
    ]
    if view.runs:
        out.append("runs now: " + ", ".join(
            f"{r['flow']}/{r['step']} ({r['status']})" for r in view.runs
        ))
    if view.data:
        out.append("data: " + ", ".join(f"{safe(k)}={_compact(v)}" for k, v in view.data.items()))
    for timer in view.pending_timers:
        out.append(paint("yellow", f"pending timer {safe(timer['key'])} at {_time(timer['at'])}"))
    for row in view.unpublished:
        out.append(paint("yellow", f"not yet published: outbox row {row['id']} "
                                   f"{row['kind'] or 'timer'} {safe(row['key'])}"))
    for dead in view.dead_lettered:
        out.append(paint("red", "dead-lettered input " + dead_letter_line(dead)))
    if view.has_earlier:
        out.append(paint("dim", f"(turns 1-{view.first_version - 1} not shown)"))
    for turn in view.turns:
        out.append("")
        for dead in turn.dead_before:
            out.append(paint("red", f"✗ dead-lettered input {dead_letter_line(dead)} (no turn)"))
        out.extend(_turn_lines(turn, paint))
    for dead in view.dead_after:
        out.append(paint("red", f"✗ dead-lettered input {dead_letter_line(dead)} (no turn)"))
    if view.has_later:
        out.append(paint("dim", f"(turns {view.last_version + 1}-{view.turns_total} not shown)"))
    return "\n".join(out) + "\n"


def dead_letter_line(dead: dict[str, Any]) -> str:
    """One dead-lettered record: what it said, the reason and its detail, the inbound record
    it came from, its input id and key, when."""
    said = (safe(json.dumps(dead["message"], ensure_ascii=False)) if dead.get("message")
            else "(no message text could be read)")
    text = f"{said}: {safe(dead['reason'])}"
    if dead.get("detail"):
        text += f" ({safe(dead['detail'])})"
    text += f" · inbound record {safe(dead['source'])}"
    if dead.get("input_id"):
        text += f" · input {safe(dead['input_id'])}"
    if dead.get("key"):
        text += f" · key {safe(dead['key'])}"
    return text + f" · at {_time(dead['at'])}"


def dead_letters_text(letters: list[dict[str, Any]], *, colour: bool = False,
                      next_before: int | None) -> str:
    """The dead-lettered records, one a line, with the conversation each names."""
    paint = _Paint(colour)
    if not letters:
        return "no dead-lettered record\n"
    out = [
        paint("bold", safe(d["session_id"]) if d["session_id"] else "(names no conversation)")
        + "  " + dead_letter_line(d)
        for d in letters
    ]
    if next_before is not None:
        out.append(paint("dim", f"more: --dead-letters --before {next_before}"))
    return "\n".join(out) + "\n"


def search_text(hits: list[Any], *, colour: bool = False) -> str:
    """A search's hits, one a line: the conversation and turn, where the text was found, the
    words around it, when."""
    paint = _Paint(colour)
    if not hits:
        return "nothing holds that text\n"
    out = []
    for hit in hits:
        where = paint("bold", safe(hit.session_id) if hit.session_id
                      else "(names no conversation)")
        if hit.version is not None:
            where += f" #{hit.version}"
        out.append(f"{where}  {_time(hit.at)}  {hit.where}: {safe(hit.text)}")
    return "\n".join(out) + "\n"


def _turn_lines(turn: TurnView, paint: _Paint) -> list[str]:
    head = f"#{turn.version} {_time(turn.at)} {turn.kind}"
    if turn.record_at:
        head = (f"#{turn.version} written {_time(_parsed(turn.record_at))} saved "
                f"{_time(turn.at)} {turn.kind}")
    if turn.input_id:
        head += f" {safe(turn.input_id)}"
    if turn.text is not None:
        head += f" {safe(json.dumps(turn.text, ensure_ascii=False))}"
    if turn.source:
        head += paint("dim", f"  [{safe(turn.source)}]")
    if turn.agent:
        head += paint("dim", f"  agent {safe(turn.agent)}")
    if turn.incidents:
        head += " " + paint("red", " ".join(f"<{i}>" for i in turn.incidents))
    lines = [paint("bold", head)]

    def block(label: str, items: Iterable[str]) -> None:
        for n, item in enumerate(items):
            lines.append(f"   {(label if n == 0 else ''):<11} {item}")

    if turn.retries:
        block("retries", [paint("yellow", _retries(turn.retries))])
    if turn.queued:
        block("waited", [paint("yellow", safe(turn.waited))])
    if turn.understood:
        block("understood", (_call(call) for call in turn.understood))
    elif turn.fallback_reason is not None:
        block("understood", [paint("yellow", "the model could not answer "
                                             f"({safe(turn.fallback_reason)}): fallback sent")])
    elif turn.llm_calls and not turn.recorded:
        block("understood", [paint("dim", "(no recording kept for this turn)")])
    block("decided", (_line(line) for line in turn.decided))
    block("skipped", (f"{safe(s.get('flow_id'))}: {safe(s.get('code'))}" for s in turn.skipped))
    block("sent", (
        f"{m.kind} {safe(json.dumps(m.text, ensure_ascii=False))} key {safe(m.key)} "
        + (paint("green", "published") if m.published else paint("yellow", "in the outbox"))
        + (f" after {m.after_ms} ms" if m.after_ms else "")
        + (f" hand-off {_compact(m.handoff)}" if m.handoff else "")
        for m in turn.sent
    ))
    block("timers", (
        f"{safe(t.key)} at {safe(t.at)} {t.state}"
        + (f" (replaces {safe(t.replaces)})" if t.replaces else "")
        for t in turn.timers
    ))
    cost = f"{turn.llm_calls} model call(s)"
    if turn.credits is not None:
        cost += f", {turn.credits} credit(s)"
    block("cost", [paint("dim", cost)])
    if turn.trace_id:
        block("trace", [paint("dim", turn.trace_id + (f" {safe(turn.trace_url)}"
                                                       if turn.trace_url else ""))])
    return lines


def _retries(retries: dict[str, Any]) -> str:
    attempts = retries.get("attempts")
    return (f"{attempts} failed attempt(s) over {retries.get('waited_ms')} ms, the last: "
            f"{safe(retries.get('last_error') or '')}")


def _call(call: dict[str, Any]) -> str:
    cost = ""
    if call.get("latency_ms") is not None:
        cost += f" [{call['latency_ms']:.1f} ms"
        if call.get("input_tokens") is not None:
            cost += f", {call['input_tokens']} in / {call.get('output_tokens')} out tokens"
            if call.get("cache_read_tokens") is not None:
                cost += f", {call['cache_read_tokens']} cached"
        cost += "]"
    if not call["ok"]:
        return f"{call['kind']}: failed {safe(call.get('error') or '')}{cost}"
    if call["json"] is not None:
        return f"{call['kind']}: {_compact(call['json'])}{cost}"
    return f"{call['kind']}: {safe(json.dumps(call['text'], ensure_ascii=False))}{cost}"


def _line(line: Any) -> str:
    where = "/".join(p for p in (line.flow, line.step) if p) or "turn"
    text = f"{line.code} {safe(where)}"
    if line.detail:
        text += f" ({safe(line.detail)})"
    if line.status:
        text += f" → {line.status}"
    if line.llm_calls:
        text += f" [{line.llm_calls} model call(s)]"
    if line.credits is not None:
        text += f" [{line.credits} credit(s)]"
    return text


def list_text(items: list[ListItem], *, colour: bool = False, next_cursor: str | None) -> str:
    paint = _Paint(colour)
    if not items:
        return "no conversation matches\n"
    out = []
    for item in items:
        runs = ", ".join(f"{r['flow']}/{r['step']} ({r['status']})" for r in item.runs) or (
            "with a person" if item.with_person else "idle")
        flags = " ".join(paint("red", f"<{i}>") for i in item.incidents)
        if item.handoff_reason:
            flags += f" (hand-off: {safe(item.handoff_reason)})"
        if item.dead_reason:
            flags += f" (dead letter: {safe(item.dead_reason)})"
        last = (
            f"{item.last_kind} {safe(json.dumps(item.last_text, ensure_ascii=False))}"
            if item.last_kind else ""
        )
        out.append(
            f"{paint('bold', safe(item.session_id))}  {_time(item.at)}  {item.turns} turns  "
            f"{safe(runs)}  {flags}  {paint('dim', last)}".rstrip()
        )
    if next_cursor:
        out.append(paint("dim", f"more: --after {next_cursor}"))
    return "\n".join(out) + "\n"
