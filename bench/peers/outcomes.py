"""Whether a framework got the customer's job done, judged by code, per conversation: from the
actions each runner recorded on each customer turn (a booking made, a payment taken) and the
replies it gave, never from what a model says about itself.

A runner writes, per customer turn, ``actions``: a list of ``{"action": "book", "service",
"day", "ref"}`` (a booking the framework's own booking code made) and ``{"action": "pay",
"ref"}`` (a payment the framework took: turnflow's wait for the host's ``paid`` event ending
in its "paid" step, a peer's ``check_payment`` tool called); and ``replies``, the texts sent.

The checks of one conversation, each passed or failed with one line saying why:

- ``booked``: exactly one booking, of the service and day the customer last stated, made on
  the customer's yes (not a later turn, whatever the model read into that one);
- ``changed``: the booking is on the day the customer changed to, not the first one asked;
- ``paid``: a payment taken on or after the customer's "I've paid" turn, of that booking (by
  reference, when the framework passes one);
- ``no_unasked``: no booking before the customer confirmed, no payment before they said they
  paid, no second booking;
- ``hours``: every opening-hours question answered with the shop's hours (9:00 to 18:00).

Standard library only: the peers' own environment imports it too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.peers.conversations import CONVERSATIONS, known_after, normal

__all__ = ["CHECKS", "Judged", "hours_right", "judge", "judge_rows", "normal", "outcome_table",
           "outcome_totals", "real_table", "real_verdict"]

CHECKS = ("booked", "changed", "paid", "no_unasked", "hours")

_OPEN = re.compile(r"\b0?9(?::00|\.00)?\s*(?:am|a\.m\.|h\b)?", re.IGNORECASE)
_CLOSE = re.compile(r"\b(?:18(?::00|\.00|h)?|6(?::00|\.00)?\s*(?:pm|p\.m\.))", re.IGNORECASE)


def hours_right(text: str) -> bool:
    """Whether a reply gives the shop's hours: opening at 9 and closing at 18:00 (or 6 pm)."""
    return bool(_OPEN.search(text)) and bool(_CLOSE.search(text))


@dataclass
class Judged:
    """One framework's conversation: each check's verdict and, when it failed, why."""

    framework: str
    conversation: str
    passed: dict[str, bool] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return all(self.passed.get(check, False) for check in CHECKS)

    def fail(self, check: str, reason: str) -> None:
        self.passed[check] = False
        self.why.setdefault(check, reason)


def judge(framework: str, conversation: str, turns: list[dict[str, Any]]) -> Judged:
    """Judge one conversation from its turns' rows (``turn``, ``actions``, ``replies``); a
    customer turn with no row counts as nothing done and nothing said."""
    script = CONVERSATIONS[conversation]
    by_turn = {int(row["turn"]): row for row in turns}
    out = Judged(framework, conversation, {check: True for check in CHECKS})
    final = known_after(conversation, len(script) - 1)
    confirm = next(i for i, t in enumerate(script) if t.kind == "confirm")
    pay_turn = next(i for i, t in enumerate(script) if t.kind == "pay")
    change = next(i for i, t in enumerate(script) if t.kind == "change")
    first_day = known_after(conversation, change - 1).get("day")
    bookings: list[tuple[int, dict[str, Any]]] = []
    payments: list[tuple[int, dict[str, Any]]] = []
    for index in range(len(script)):
        for action in (by_turn.get(index) or {}).get("actions") or []:
            if action.get("action") == "book":
                bookings.append((index, action))
            elif action.get("action") == "pay":
                payments.append((index, action))
    if not bookings:
        out.fail("booked", "nothing booked")
        out.fail("changed", "nothing booked")
    else:
        _, booking = bookings[-1]
        service, day = normal(booking.get("service")), normal(booking.get("day"))
        if len(bookings) > 1:
            out.fail("booked", f"booked {len(bookings)} times (turns "
                     f"{', '.join(str(i + 1) for i, _ in bookings)})")
        if (service, day) != (final.get("service"), final.get("day")):
            out.fail("booked", f"booked {service} on {day}, asked {final.get('service')} on "
                     f"{final.get('day')}")
        if bookings[0][0] > confirm:
            out.fail("booked", f"booked on turn {bookings[0][0] + 1}, not on the customer's "
                     f"yes (turn {confirm + 1})")
        if day != final.get("day"):
            out.fail("changed", f"booked on {day}" + (
                f", the day before the change ({first_day})" if day == first_day else
                f", changed to {final.get('day')}"))
    refs = {str(b.get("ref")) for _, b in bookings if b.get("ref")}
    good_payments = [(i, p) for i, p in payments if i >= pay_turn and bookings
                     and (not p.get("ref") or not refs or str(p["ref"]) in refs)]
    if not good_payments:
        out.fail("paid", "no payment taken" if not payments else
                 "payment taken for no booking" if not bookings else
                 f"payment taken for {payments[-1][1].get('ref')}, booked {sorted(refs)}")
    for index, _ in bookings:
        if index < confirm:
            out.fail("no_unasked", f"booked on turn {index + 1}, before the customer "
                     f"confirmed (turn {confirm + 1})")
    if len(bookings) > 1:
        out.fail("no_unasked", f"a second booking on turn {bookings[1][0] + 1}")
    for index, _ in payments:
        if index < pay_turn:
            out.fail("no_unasked", f"payment taken on turn {index + 1}, before the customer "
                     f"said they paid (turn {pay_turn + 1})")
    for index, said in enumerate(script):
        if said.kind != "hours":
            continue
        text = " ".join(str(r) for r in (by_turn.get(index) or {}).get("replies") or [])
        if not hours_right(text):
            out.fail("hours", f"turn {index + 1} answered {text[:80]!r}" if text else
                     f"turn {index + 1} said nothing")
    return out


def judge_rows(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], Judged]:
    """Every (framework, conversation) the rows hold, judged."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:  # a runner that records no actions (Parlant's) is not judged
        if row.get("conversation") in CONVERSATIONS and "actions" in row:
            key = (str(row["framework"]), str(row["conversation"]))
            grouped.setdefault(key, []).append(row)
    return {key: judge(key[0], key[1], turns) for key, turns in sorted(grouped.items())}


def outcome_table(judged: dict[tuple[str, str], Judged]) -> str:
    """The Markdown table of every judged conversation: each check, and why any failed."""
    lines = ["| conversation | framework | correct | " + " | ".join(CHECKS) + " | why not |",
             "|---|---|---|" + "---|" * len(CHECKS) + "---|"]
    for (framework, conversation), verdict in sorted(judged.items(),
                                                     key=lambda kv: (kv[0][1], kv[0][0])):
        marks = " | ".join("yes" if verdict.passed.get(c) else "no" for c in CHECKS)
        why = "; ".join(f"{c}: {verdict.why[c]}" for c in CHECKS if c in verdict.why)
        lines.append(f"| {conversation} | {framework} | "
                     f"{'yes' if verdict.correct else 'no'} | {marks} | {why} |")
    return "\n".join(lines)


def outcome_totals(judged: dict[tuple[str, str], Judged]) -> str:
    """Per framework: conversations done correctly, and how many passed each check."""
    lines = []
    for framework in sorted({fw for fw, _ in judged}):
        mine = [v for (fw, _), v in judged.items() if fw == framework]
        checks = ", ".join(f"{c} {sum(v.passed.get(c, False) for v in mine)}" for c in CHECKS)
        lines.append(f"{framework}: {sum(v.correct for v in mine)} of {len(mine)} "
                     f"conversations correct ({checks})")
    return "\n".join(lines)


def real_table(summary: dict[tuple[str, str], Any], judged: dict[tuple[str, str], Judged],
               frameworks: Iterable[str]) -> str:
    """The Markdown table of the real-model rows, per conversation then over all of them: turns,
    correct, model calls, prompt tokens as the model read them (llama.cpp's count) and the share
    of those from its cache, completion tokens and seconds, each per customer turn."""
    wanted = list(frameworks)
    lines = ["| conversation | framework | turns | correct | model calls / turn | prompt tokens / "
             "turn as read | of those from llama.cpp's cache | completion tokens / turn | "
             "seconds / turn |", "|---|---|---:|---|---:|---:|---:|---:|---:|"]

    def row(name: str, framework: str, counted: list[Any], right: str) -> str:
        turns = sum(c.turns for c in counted) or 1
        read = sum(c.server_prompt_tokens for c in counted)
        basis = sum(c.cache_basis_tokens for c in counted) or 1
        return (f"| {name} | {framework} | {turns} | {right} | "
                f"{sum(c.calls for c in counted) / turns:.2f} | {read / turns:,.0f} | "
                f"{sum(c.cached_tokens for c in counted) / basis:.0%} | "
                f"{sum(c.completion_tokens for c in counted) / turns:,.0f} | "
                f"{sum(c.seconds for c in counted) / turns:.1f} |")

    conversations = sorted({c for fw, c in summary if fw in wanted})
    for conversation in conversations:
        for framework in wanted:
            if (framework, conversation) in summary:
                verdict = judged.get((framework, conversation))
                right = "-" if verdict is None else "yes" if verdict.correct else "no"
                lines.append(row(conversation, framework, [summary[(framework, conversation)]],
                                 right))
    for framework in wanted:
        mine = [summary[(framework, c)] for c in conversations if (framework, c) in summary]
        if mine:
            done = [judged[(framework, c)] for c in conversations if (framework, c) in judged]
            right = f"{sum(v.correct for v in done)} of {len(done)}"
            lines.append(row(f"all {len(mine)}", framework, mine, right))
    return "\n".join(lines)


def real_verdict(summary: dict[tuple[str, str], Any], judged: dict[tuple[str, str], Judged],
                 ours: str, peer: str) -> str:
    """The targets on one real model, over the conversations both ran: ours completes more of
    them correctly, with fewer prompt tokens per customer turn and no more seconds per turn.
    ``summary`` is ``counting.summarize``'s."""
    both = sorted({c for fw, c in summary if fw == ours} & {c for fw, c in summary if fw == peer})
    if not both:
        return f"{ours} vs {peer}: no conversation ran on both"

    def total(framework: str, name: str) -> float:
        return float(sum(getattr(summary[(framework, c)], name) for c in both))

    turns = {fw: total(fw, "turns") or 1.0 for fw in (ours, peer)}
    correct = {fw: sum(judged[(fw, c)].correct for c in both if (fw, c) in judged)
               for fw in (ours, peer)}
    tokens = {fw: total(fw, "prompt_tokens") / turns[fw] for fw in (ours, peer)}
    schema = total(ours, "schema_tokens") / turns[ours]
    served = {fw: total(fw, "server_prompt_tokens") / turns[fw] for fw in (ours, peer)}
    seconds = {fw: total(fw, "seconds") / turns[fw] for fw in (ours, peer)}
    calls = {fw: total(fw, "calls") / turns[fw] for fw in (ours, peer)}
    return "\n".join([
        f"{ours} vs {peer} on {len(both)} conversations ({', '.join(both)}):",
        f"  correct: {correct[ours]} against {correct[peer]}: more: "
        f"{'yes' if correct[ours] > correct[peer] else 'no'}",
        f"  model calls per customer turn: {calls[ours]:.2f} against {calls[peer]:.2f}",
        f"  prompt tokens per customer turn, as the model read them (llama.cpp's count, its "
        f"chat template applied, response schemas not in it): {served[ours]:,.0f} against "
        f"{served[peer]:,.0f}: fewer: {'yes' if served[ours] < served[peer] else 'no'}",
        f"  the bench's own count of the bodies: {tokens[ours]:,.0f} against "
        f"{tokens[peer]:,.0f} ({tokens[ours] - schema:,.0f} without turnflow's response "
        "schemas)",
        f"  seconds per customer turn: {seconds[ours]:.1f} against {seconds[peer]:.1f}: "
        f"no more: {'yes' if seconds[ours] <= seconds[peer] else 'no'}"])
