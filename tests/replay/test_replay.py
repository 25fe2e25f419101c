"""Replaying recorded conversations: identical on the same agent, and the first departing turn
with its diff when the agent changes."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from typing import Any

from replay import Conversation, record_conversation, replay_conversation
from replay.report import Expectations, junit_xml, report_json, report_text
from replay.session import replay_many
from tests.replay.support import NAMES, demo, script, step


async def _recorded(count: int) -> list[Conversation]:
    """``count`` conversations on the same flows, recorded at the same time."""
    agent = demo()
    return list(await asyncio.gather(
        *(record_conversation(agent, f"s-{n}", script(n)) for n in range(count))))


async def test_recorded_conversations_replay_identical_on_the_same_agent() -> None:
    """Thirty conversations on the same flows, replayed together, all identical; every
    recorded model call was served and none was missing."""
    conversations = await _recorded(30)
    assert sum(len(t.calls or []) for c in conversations for t in c.turns) > 60
    summary = await replay_many(demo(), conversations)
    assert summary.counts()["identical"] == 30 and summary.unrecorded == 0
    assert summary.ok


async def test_each_conversation_keeps_its_own_replies_and_wakes() -> None:
    """Nothing of one conversation reaches another: each one's replies name its own customer,
    its wakes carry its own session, and its recorded calls answer only its own turns."""
    conversations = await _recorded(20)
    for n, conversation in enumerate(conversations):
        texts = [m["text"] for t in conversation.turns for m in t.recorded.messages]
        if n % 5 != 4:
            assert any(NAMES[n % len(NAMES)] in text for text in texts)
            others = {NAMES[k % len(NAMES)] for k in range(20)} - {NAMES[n % len(NAMES)]}
            assert not any(re.search(rf"\b{other}\b", text)
                           for text in texts for other in others)
        # Silence wakes name their session (followed by ":", whatever else the key holds).
        silence = [w["key"] for t in conversation.turns for w in t.recorded.schedule
                   if "silence" in w["key"]]
        assert silence and all(f"s-{n}:" in key for key in silence)
        assert not any(f"s-{m}:" in key for key in silence for m in range(20) if m != n)
    # Replaying conversation 0 with conversation 1's recorded calls departs: calls are per turn
    # of their own conversation, not interchangeable.
    zero, one = conversations[0], conversations[1]
    swapped = Conversation(zero.session_id, [
        type(t)(t.version, t.input, t.at, t.logged_at, o.calls, t.recorded)
        for t, o in zip(zero.turns, one.turns, strict=False)])
    report = await replay_conversation(demo(), swapped)
    assert report.status == "changed"


async def test_a_wording_change_departs_at_the_first_turn_that_says_it() -> None:
    """The greeting reworded: conversations that greet depart at turn 1, with a diff of
    exactly that message; the opening-hours ones stay identical."""
    conversations = await _recorded(10)

    def reword(flows: list[dict[str, Any]]) -> None:
        step(flows, "welcome", "hello")["say"] = "Hello! Ana here, at Spoke & Chain."

    summary = await replay_many(demo(reword), conversations)
    by_status = Counter(r.status for r in summary.reports)
    assert by_status == {"changed": 8, "identical": 2}
    report = summary.reports[0]
    assert report.departure is not None and report.departure.turn == 1
    [difference] = report.departure.differences
    assert difference.aspect == "messages"
    assert difference.diff() == [
        "- verbatim: Hi! I'm Ana from Spoke & Chain bike repair.",
        "+ verbatim: Hello! Ana here, at Spoke & Chain.",
        "  ai: Could you tell me your first name?",
    ]
    assert not summary.ok
    wording = Expectations.parse(["messages"])
    assert all(wording.expects(r) for r in summary.reports)


async def test_a_flow_change_departs_at_the_right_later_turn() -> None:
    """A brakes job that skips its note departs at the turn that asked for brakes (turn 3, or
    turn 5 for the customer who first said no and then chose brakes), in messages and outcomes;
    other services stay identical."""
    conversations = await _recorded(6)

    def no_note(flows: list[dict[str, Any]]) -> None:
        step(flows, "booking", "brakes?")["then"] = {"step": "summary", "clear": ["confirmed"]}

    summary = await replay_many(demo(no_note), conversations)
    changed = {r.session_id: r for r in summary.reports if r.status == "changed"}
    assert set(changed) == {"s-1", "s-2", "s-5"}  # the ones that ask for brakes
    assert changed["s-1"].departure is not None and changed["s-1"].departure.turn == 5
    departure = changed["s-2"].departure
    assert departure is not None and departure.turn == 3 and departure.kind == "message"
    assert departure.aspects[:2] == ["messages", "outcomes"]
    messages = departure.differences[0].diff()
    assert "- verbatim: Brake jobs take about two hours; please bring the bike in the morning." \
        in messages
    assert not Expectations.parse(["messages"]).expects(changed["s-2"])


async def test_a_new_model_call_is_counted_as_unrecorded() -> None:
    """An agent that now asks the model where it did not is told there is no recorded reply,
    and the summary counts the call by kind."""
    conversations = await _recorded(5)

    def ask_hours(flows: list[dict[str, Any]]) -> None:
        flow = next(f for f in flows if f["id"] == "hours")
        flow["steps"] = [{"id": "hours", "collect": [], "prompt": "Tell them the hours."}]

    summary = await replay_many(demo(ask_hours), conversations)
    hours = summary.reports[4]
    assert hours.status == "changed" and hours.unrecorded >= 1
    assert summary.unrecorded_by_kind["speak"] >= 1
    assert "unrecorded" in report_text(summary)


async def test_reports_for_ci_name_each_conversation_and_fail_only_unexpected_changes() -> None:
    """JSON carries the counts and the diffs; JUnit has one case per conversation and a
    failure only for a change that was not expected."""
    from xml.etree import ElementTree

    conversations = await _recorded(5)

    def reword(flows: list[dict[str, Any]]) -> None:
        step(flows, "welcome", "hello")["say"] = "Hey!"

    summary = await replay_many(demo(reword), conversations,
                                expectations=Expectations.parse(["s-1"]))
    body = json.loads(report_json(summary))
    assert body["summary"]["changed"] == 4 and body["summary"]["unexpected"] == 3
    first = body["conversations"][0]
    assert first["departure"]["differences"][0]["diff"][1] == "+ verbatim: Hey!"
    suite = ElementTree.fromstring(junit_xml(summary))
    assert suite.get("tests") == "5" and suite.get("failures") == "3"
    failed = {c.get("name") for c in suite if c.find("failure") is not None}
    assert failed == {"s-0", "s-2", "s-3"}
