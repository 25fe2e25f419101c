"""The harness of ``make bench-peers`` without the peers: the scripted server's decisions, the
counting of what a framework sent, and turnflow's side end to end against the scripted server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.peers.bench_peers import start_server
from bench.peers.conversations import CONVERSATIONS, booking_ref, tool_for
from bench.peers.counting import count, prompt_text, schema_text, summarize, verdict
from bench.peers.outcomes import (
    CHECKS,
    hours_right,
    judge,
    judge_rows,
    real_table,
    real_verdict,
)
from bench.peers.run_turnflow import run
from bench.peers.scripted_server import embedding, reply_for
from consumer.processes import free_port


def chars(text: str) -> list[int]:
    """A tokenizer of one token per character: counting must not depend on the tokenizer."""
    return [ord(c) for c in text]


def _request(framework: str, turn: int, body: dict[str, Any], reply: str = "ok",
             path: str = "/v1/chat/completions") -> dict[str, Any]:
    return {"framework": framework, "conversation": "c01", "turn": turn, "path": path,
            "body": body, "reply": {"role": "assistant", "content": reply}}


def test_counting_sums_calls_tokens_and_the_shared_prefix_per_turn() -> None:
    """Calls and prompt tokens are summed per turn, the cached part is the prefix shared with
    the framework's previous request, set-up calls and embeddings are not model calls."""
    first = {"messages": [{"role": "system", "content": "abc"}, {"role": "user", "content": "x"}]}
    second = {"messages": [*first["messages"], {"role": "assistant", "content": "y"}]}
    requests = [
        _request("fw", -1, {"messages": [{"role": "user", "content": "setup"}]}),
        _request("fw", 0, first, reply="hello"),
        _request("fw", 0, second),
        _request("fw", 0, {"input": ["a"]}, path="/v1/embeddings"),
        _request("other", 0, first),
    ]
    rows = [{"framework": "fw", "conversation": "c01", "turn": 0, "seconds": 0.5,
             "cpu_seconds": 0.25}]
    counts = count(requests, rows, chars)
    mine = counts[("fw", "c01", 0)]
    assert mine.calls == 2 and mine.embedding_calls == 1
    assert mine.prompt_tokens == len(prompt_text(first)) + len(prompt_text(second))
    # the first turn request shares only "<|" with the set-up one; the second extends the first
    assert mine.cached_tokens == len("<|") + len(prompt_text(first))
    assert mine.completion_tokens == len("hello") + len("ok")
    assert (mine.seconds, mine.cpu_seconds) == (0.5, 0.25)
    assert counts[("other", "c01", 0)].cached_tokens == 0  # another framework's slot


def test_tools_and_the_schema_are_part_of_the_prompt() -> None:
    """What a server turns into model input counts: tool definitions and a response schema,
    the schema's share also counted apart."""
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    tools = {**plain, "tools": [{"type": "function", "function": {"name": "opening_hours"}}]}
    schema = {**plain, "response_format": {"type": "json_schema",
                                           "json_schema": {"name": "speak", "schema": {}}}}
    assert "opening_hours" in prompt_text(tools) and "speak" in prompt_text(schema)
    assert len(prompt_text(tools)) > len(prompt_text(plain)) < len(prompt_text(schema))
    counted = count([_request("fw", 0, schema), _request("fw", 0, tools)], [], chars)
    assert counted[("fw", "c01", 0)].schema_tokens == len(schema_text(schema)) > 0
    assert schema_text(tools) == ""


def test_verdict_says_no_when_one_conversation_is_not_lower() -> None:
    """The verdict holds only when every conversation is lower, and says which ratio failed."""
    def turn(framework: str, conversation: str, calls: int, tokens: int) -> dict[str, Any]:
        return {"framework": framework, "conversation": conversation, "turn": 0,
                "path": "/v1/chat/completions", "body": {"messages": [
                    {"role": "user", "content": "z" * tokens}]}, "reply": {}}
    requests = [turn("us", "c01", 1, 10), turn("peer", "c01", 1, 50),
                turn("peer", "c01", 1, 50), turn("us", "c02", 1, 90), turn("peer", "c02", 1, 40)]
    _, fewer = verdict(summarize(count(requests, [], chars)), "us", ["peer"])
    assert fewer == {"peer": {"calls": False, "prompt_tokens": False}}
    _, only_first = verdict(summarize(count(requests[:3], [], chars)), "us", ["peer"])
    assert only_first == {"peer": {"calls": True, "prompt_tokens": True}}


def test_a_react_agent_gets_the_turns_tool_then_its_closing_reply() -> None:
    """On the confirmation, a tool-calling agent is told to book with the known answers; once
    the tool answered, it gets the closing reply naming the booking's reference."""
    confirm = next(i for i, t in enumerate(CONVERSATIONS["c01"]) if t.kind == "confirm")
    tools = [{"type": "function", "function": {"name": name}}
             for name in ("opening_hours", "book_repair", "check_payment")]
    body: dict[str, Any] = {"tools": tools, "messages": [{"role": "user", "content": "yes"}]}
    tag = {"framework": "langgraph", "conversation": "c01", "turn": confirm}
    call = reply_for(body, tag)["tool_calls"][0]["function"]
    assert call["name"] == "book_repair"
    assert json.loads(call["arguments"]) == {"service": "brakes", "day": "friday", "name": "Sam"}
    body["messages"] += [{"role": "assistant", "tool_calls": []}, {"role": "tool", "content": ""}]
    closing = reply_for(body, tag)["content"]
    assert booking_ref("c01", "brakes", "friday") in closing
    assert tool_for("c01", 0) is None  # a greeting calls no tool


def test_embeddings_are_deterministic_unit_vectors() -> None:
    """Equal texts embed equally; every vector has the asked dimensions and unit length."""
    a, b = embedding("book a repair", 64), embedding("opening hours", 64)
    assert a == embedding("book a repair", 64) and a != b and len(a) == 64
    assert abs(sum(v * v for v in a) - 1) < 1e-9


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_any_recorded_body_renders_without_raising(body: Any) -> None:
    """A recorded body of any shape renders to a prompt text (possibly empty), never raises."""
    assert isinstance(prompt_text(body if isinstance(body, dict) else {"messages": body}), str)


def test_a_real_models_failed_turn_is_recorded_and_the_conversation_goes_on(
        tmp_path: Path) -> None:
    """On a real model a turn whose model call fails is recorded with its error and the next
    customer message still runs; on the scripted server the same failure is raised."""
    import pytest

    from bench.peers.run_turnflow import conversation
    from bench.peers.timing import Timings
    from engine import ProviderError

    class Down:
        async def generate(self, request: Any) -> Any:
            raise ProviderError("the model is down", kind="retryable")

    port = free_port()
    server = start_server(port, tmp_path / "requests.jsonl", tmp_path / "server.log")
    url = f"http://127.0.0.1:{port}/v1"
    try:
        timings = Timings(tmp_path / "rows.jsonl", "turnflow-real")
        asyncio.run(conversation(url, timings, "c05", Down(), "turnflow-real",
                                 real=True))
        with pytest.raises(ProviderError):
            asyncio.run(conversation(url, Timings(tmp_path / "scripted.jsonl", "turnflow"),
                                     "c05", Down(), real=False))
    finally:
        server.terminate()
        server.wait(timeout=10)
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["turn"] for r in rows] == list(range(len(CONVERSATIONS["c05"])))
    assert all("the model is down" in r["error"] for r in rows if r["kind"] != "pay")
    assert not judge_rows(rows)[("turnflow-real", "c05")].correct


def test_turnflow_books_and_is_paid_in_every_conversation(tmp_path: Path) -> None:
    """Through its OpenAI provider against the scripted server, the demo agent books and is
    paid in every conversation, at most two model calls a customer message, each request
    recorded under its conversation and turn, conversations never mixed."""
    port = free_port()
    record = tmp_path / "requests.jsonl"
    server = start_server(port, record, tmp_path / "server.log")
    try:
        replies = asyncio.run(run(f"http://127.0.0.1:{port}/v1", tmp_path / "rows.jsonl"))
    finally:
        server.terminate()
        server.wait(timeout=10)
    for cid, said in replies.items():
        text = " ".join(said)
        ref = next(w for w in text.split() if w.startswith("R-")).rstrip(".")
        assert "Booked:" in text and "Payment received" in text, cid
        assert all(ref not in " ".join(other) for o, other in replies.items() if o != cid)
    requests = [json.loads(line) for line in record.read_text().splitlines()]
    counts = count(requests, [], chars)
    assert {(c, t) for _, c, t in counts} == {
        (cid, i) for cid, turns in CONVERSATIONS.items() for i in range(len(turns))}
    assert all(1 <= counted.calls <= 2 for counted in counts.values())
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == sum(len(t) for t in CONVERSATIONS.values())
    judged = judge_rows(rows)
    assert set(judged) == {("turnflow", cid) for cid in CONVERSATIONS}
    assert all(v.correct for v in judged.values()), {k: v.why for k, v in judged.items()}


def _tool_agent_rows(cid: str) -> list[dict[str, Any]]:
    """The rows a tool-calling agent answered by the scripted server leaves: each turn's tool
    as its action (as run_langgraph records them), the closing reply as its text."""
    from bench.peers.conversations import final_reply

    rows = []
    for index in range(len(CONVERSATIONS[cid])):
        wanted, actions = tool_for(cid, index), []
        if wanted and wanted[0] == "book_repair":
            service, day = wanted[1]["service"], wanted[1]["day"]
            actions.append({"action": "book", "service": service, "day": day,
                            "ref": booking_ref(cid, service, day)})
        elif wanted and wanted[0] == "check_payment":
            actions.append({"action": "pay", "ref": wanted[1]["booking_ref"]})
        rows.append({"framework": "peer", "conversation": cid, "turn": index,
                     "actions": actions, "replies": [final_reply(cid, index)]})
    return rows


def test_the_scripted_tool_agent_is_judged_correct_on_every_conversation() -> None:
    """The decisions the scripted server gives a ReAct agent get every conversation done."""
    for cid in CONVERSATIONS:
        verdict_ = judge("peer", cid, _tool_agent_rows(cid))
        assert verdict_.correct and set(verdict_.passed) == set(CHECKS), (cid, verdict_.why)


def _at(rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    cid = rows[0]["conversation"]
    return rows[next(i for i, t in enumerate(CONVERSATIONS[cid]) if t.kind == kind)]


def test_each_way_of_failing_the_job_fails_its_check_with_a_reason() -> None:
    """Not booked, booked on the day before the change, booked twice, before the yes or after
    it, paid for another booking or before the customer said so, the hours answered wrong: each
    fails the check it is about, and says why in one line."""
    def failed(rows: list[dict[str, Any]]) -> dict[str, str]:
        verdict_ = judge("peer", "c01", rows)
        assert not verdict_.correct and set(verdict_.why) <= set(CHECKS)
        assert all(r and "\n" not in r for r in verdict_.why.values())
        return verdict_.why

    rows = _tool_agent_rows("c01")
    _at(rows, "confirm")["actions"] = []
    assert set(failed(rows)) == {"booked", "changed", "paid"}
    assert failed(rows)["booked"] == "nothing booked"

    rows = _tool_agent_rows("c01")
    _at(rows, "confirm")["actions"][0]["day"] = "Saturday"  # the day before the change
    why = failed(rows)
    assert "saturday" in why["booked"] and "before the change" in why["changed"]

    rows = _tool_agent_rows("c01")
    _at(rows, "hours")["actions"] = list(_at(rows, "confirm")["actions"])  # before the yes
    why = failed(rows)
    assert set(why) == {"booked", "no_unasked"} and "before the customer confirmed" in \
        why["no_unasked"]

    rows = _tool_agent_rows("c01")
    _at(rows, "pay")["actions"][:0] = _at(rows, "confirm")["actions"]  # booked a turn late
    _at(rows, "confirm")["actions"] = []
    why = failed(rows)
    assert set(why) == {"booked"} and "not on the customer's yes" in why["booked"]

    rows = _tool_agent_rows("c01")
    _at(rows, "pay")["actions"][0]["ref"] = "R-000000"
    assert set(failed(rows)) == {"paid"}

    rows = _tool_agent_rows("c01")
    _at(rows, "hours")["actions"] = [{"action": "pay", "ref": None}]
    assert set(failed(rows)) == {"no_unasked"}

    rows = _tool_agent_rows("c01")
    _at(rows, "hours")["replies"] = ["We're open every day."]
    assert "every day" in failed(rows)["hours"]
    _at(rows, "hours")["replies"] = []
    assert "said nothing" in failed(rows)["hours"]


def test_the_hours_are_read_in_the_ways_a_model_writes_them() -> None:
    """9:00 to 18:00 as the shop writes it, or 9 am to 6 pm; other hours are not the shop's."""
    for text in ("We're open Monday to Saturday, 9:00 to 18:00.", "9am-6pm, Mon-Sat",
                 "from 9 a.m. to 6 p.m.", "09:00-18:00"):
        assert hours_right(text), text
    for text in ("We're open 10:00 to 18:00.", "9:00 to 17:00", "We're open Monday to "
                 "Saturday.", "Call us at 555-0918."):
        assert not hours_right(text), text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "turn": st.integers(-2, 9),
    "actions": st.lists(st.fixed_dictionaries({
        "action": st.sampled_from(["book", "pay", "other"]),
        "service": st.none() | st.text(max_size=12) | st.integers(),
        "day": st.none() | st.text(max_size=12),
        "ref": st.none() | st.text(max_size=8)}), max_size=3) | st.none(),
    "replies": st.lists(st.text(max_size=30), max_size=2) | st.none()}), max_size=10),
    st.sampled_from(sorted(CONVERSATIONS)))
def test_any_recorded_turns_are_judged_without_raising(turns: list[dict[str, Any]],
                                                       cid: str) -> None:
    """A runner's rows of any shape get a verdict on every check, a reason for each failed."""
    verdict_ = judge("fw", cid, turns)
    assert set(verdict_.passed) == set(CHECKS)
    assert set(verdict_.why) == {c for c, ok in verdict_.passed.items() if not ok}


def test_the_real_verdict_compares_correct_tokens_the_server_read_and_seconds() -> None:
    """On a real model the targets read the conversations both frameworks ran, the prompt
    tokens as the server counted them, and the seconds per turn."""
    rows = [{**row, "framework": fw, "seconds": seconds}
            for fw, seconds in (("ours", 1.0), ("theirs", 2.0))
            for row in _tool_agent_rows("c02")]
    rows[-1]["actions"] = []  # theirs never took the payment
    requests = [{"framework": fw, "conversation": "c02", "turn": 0, "path":
                 "/v1/chat/completions", "body": {"messages": []}, "reply": {},
                 "server_prompt_tokens": tokens, "server_cached": 0}
                for fw, tokens in (("ours", 300), ("theirs", 500))]
    summary = summarize(count(requests, rows, chars))
    said = real_verdict(summary, judge_rows(rows), "ours", "theirs")
    assert "correct: 1 against 0: more: yes" in said
    assert "fewer: yes" in said and "no more: yes" in said
    said = real_verdict(summary, judge_rows(rows), "theirs", "ours")
    assert "more: no" in said and "fewer: no" in said and "no more: no" in said


def test_the_real_table_gives_each_conversation_and_the_totals_per_turn() -> None:
    """The per-conversation table of the real rows: the verdict, calls, tokens as the server
    read them, the cache's share of them, completion tokens and seconds, each per customer turn,
    and a total row per framework over the conversations it ran."""
    rows = [{**row, "framework": fw, "conversation": cid, "seconds": seconds}
            for cid in ("c02", "c03")
            for fw, seconds in (("ours", 1.0), ("theirs", 3.0))
            for row in _tool_agent_rows(cid)]
    rows[-1]["actions"] = []  # theirs never took c03's payment
    requests = [{"framework": fw, "conversation": cid, "turn": 0, "path": "/v1/chat/completions",
                 "body": {"messages": []}, "reply": {"role": "assistant", "content": "ab"},
                 "server_prompt_tokens": tokens, "server_cached": tokens // 4}
                for cid in ("c02", "c03") for fw, tokens in (("ours", 300), ("theirs", 500))]
    summary = summarize(count(requests, rows, chars))
    turns = {cid: len(CONVERSATIONS[cid]) for cid in ("c02", "c03")}
    lines = real_table(summary, judge_rows(rows), ["ours", "theirs"]).splitlines()
    assert len(lines) == 2 + 4 + 2
    assert lines[2].startswith(f"| c02 | ours | {turns['c02']} | yes | "
                               f"{1 / turns['c02']:.2f} | {300 / turns['c02']:,.0f} | 25% |")
    assert lines[5].startswith(f"| c03 | theirs | {turns['c03']} | no |")
    total = turns["c02"] + turns["c03"]
    assert lines[6] == (f"| all 2 | ours | {total} | 2 of 2 | {2 / total:.2f} | "
                        f"{600 / total:,.0f} | 25% | {4 / total:,.0f} | 1.0 |")
    assert lines[7].startswith(f"| all 2 | theirs | {total} | 1 of 2 |")
    assert lines[7].endswith("| 3.0 |")


PARLANT_CHECKS_SCHEMA = {
    "$defs": {"Check": {"type": "object", "required": ["guideline_id", "condition",
                                                        "rationale", "applies"],
                        "properties": {"guideline_id": {"type": "string"},
                                       "condition": {"type": "string"},
                                       "rationale": {"type": "string"},
                                       "applies": {"type": "boolean"}}}},
    "type": "object", "required": ["checks"],
    "properties": {"checks": {"type": "array", "items": {"$ref": "#/$defs/Check"}}},
}


def _parlant_prompt(output_format: str) -> dict[str, Any]:
    return {"messages": [{"role": "developer",
                          "content": "Example: {\"guideline_id\": \"x\", \"condition\": "
                          "\"The customer confirms the booking\"}\nOUTPUT FORMAT\n"
                          + output_format}]}


def test_parlant_guideline_checks_follow_the_turn() -> None:
    """A guideline-matching call gets one check per guideline its output format lists (not its
    examples'), applying only the guideline the turn is about."""
    from bench.peers import parlant_script

    parlant_script.SCHEMAS["Checks"] = PARLANT_CHECKS_SCHEMA
    body = _parlant_prompt(
        '{"checks": [{"guideline_id": "1", "condition": "The customer confirms the booking",'
        ' "applies": "<BOOL>"}, {"guideline_id": "2", "condition": "The customer asks about '
        'the opening hours", "applies": "<BOOL>"}]}')
    confirm = next(i for i, t in enumerate(CONVERSATIONS["c01"]) if t.kind == "confirm")
    checks = parlant_script.reply(body, "Checks", "c01", confirm)["checks"]
    assert [(c["guideline_id"], c["applies"]) for c in checks] == [("1", True), ("2", False)]
    hours = next(i for i, t in enumerate(CONVERSATIONS["c01"]) if t.kind == "hours")
    checks = parlant_script.reply(body, "Checks", "c01", hours)["checks"]
    assert [(c["guideline_id"], c["applies"]) for c in checks] == [("1", False), ("2", True)]
    assert parlant_script.reply(body, "Unknown", "c01", hours) == {}


def test_parlant_tool_batch_calls_only_the_turns_tool() -> None:
    """A tool-calling call names its candidate tool; it is called, with the known arguments,
    only when it is the turn's tool."""
    from bench.peers import parlant_script

    parlant_script.SCHEMAS["Tools"] = {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "tool_calls_for_candidate_tool": {"type": "array"}}}
    confirm = next(i for i, t in enumerate(CONVERSATIONS["c02"]) if t.kind == "confirm")
    booking = parlant_script.reply(_parlant_prompt('{"name": "built-in:book_repair"}'),
                                   "Tools", "c02", confirm)
    arguments = {a["parameter_name"]: a["value_as_string"]
                 for a in booking["tool_calls_for_candidate_tool"][0]["argument_evaluations"]}
    assert arguments == {"service": "flat-tire", "day": "tuesday", "name": "Ada"}
    hours = parlant_script.reply(_parlant_prompt('{"name": "built-in:opening_hours"}'),
                                 "Tools", "c02", confirm)
    assert hours["tool_calls_for_candidate_tool"] == []


def _post(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.loads(response.read()))


def test_a_real_rows_calls_go_upstream_and_its_cache_count_is_kept(tmp_path: Path) -> None:
    """Calls of a framework sent upstream get the upstream's answer unchanged, recorded with
    the cached prompt tokens it reported, which counting then uses instead of the prefix;
    other frameworks' calls stay scripted."""
    from bench.peers.scripted_server import server_cached

    upstream_port, proxy_port = free_port(), free_port()
    upstream = start_server(upstream_port, tmp_path / "upstream.jsonl", tmp_path / "u.log")
    proxy = start_server(proxy_port, tmp_path / "proxy.jsonl", tmp_path / "p.log",
                         upstream=f"http://127.0.0.1:{upstream_port}/v1")
    confirm = next(i for i, t in enumerate(CONVERSATIONS["c01"]) if t.kind == "confirm")
    body = {"tools": [{"type": "function", "function": {"name": "book_repair"}}],
            "messages": [{"role": "user", "content": "yes, book it"}]}
    try:
        for port, framework in ((upstream_port, "peer"), (proxy_port, "turnflow-real")):
            _post(f"http://127.0.0.1:{port}/bench/turn",
                  {"framework": framework, "conversation": "c01", "turn": confirm})
        answered = _post(f"http://127.0.0.1:{proxy_port}/v1/chat/completions", body)
    finally:
        for child in (proxy, upstream):
            child.terminate()
            child.wait(timeout=10)
    call = answered["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "book_repair"
    recorded = [json.loads(line) for line in (tmp_path / "proxy.jsonl").read_text().splitlines()]
    assert [(r["source"], r["server_cached"]) for r in recorded] == [("real", 0)]
    assert len((tmp_path / "upstream.jsonl").read_text().splitlines()) == 1
    recorded[0]["server_cached"] = 3
    counted = count(recorded, [], chars)[("turnflow-real", "c01", confirm)]
    assert counted.cached_tokens == 3
    assert server_cached({"timings": {"cache_n": 7}, "usage": {}}) == 7
    assert server_cached({"usage": {"prompt_tokens": 5}}) is None


def test_a_slow_real_model_holds_up_neither_tags_nor_other_calls(tmp_path: Path) -> None:
    """While calls wait for a slow real model (as many as Parlant sends at once), the quick
    requests (a turn's tag, an embedding) are answered at once, and each forwarded call is
    recorded under the turn it was sent in, not the one tagged when its answer came back."""
    import http.server
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    release = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            release.wait(30)
            data = json.dumps({"choices": [{"message": {"role": "assistant",
                                                        "content": "late"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    slow = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    port = free_port()
    proxy = start_server(port, tmp_path / "proxy.jsonl", tmp_path / "p.log",
                         upstream=f"http://127.0.0.1:{slow.server_address[1]}/v1")
    url = f"http://127.0.0.1:{port}"
    body = {"messages": [{"role": "user", "content": "hi"}]}
    try:
        _post(f"{url}/bench/turn", {"framework": "turnflow-real", "conversation": "c01",
                                    "turn": 0})
        with ThreadPoolExecutor(12) as pool:
            waiting = [pool.submit(_post, f"{url}/v1/chat/completions", body)
                       for _ in range(12)]
            time.sleep(0.5)  # all twelve now wait upstream
            started = time.monotonic()
            _post(f"{url}/bench/turn", {"framework": "turnflow-real", "conversation": "c01",
                                        "turn": 1})
            assert _post(f"{url}/v1/embeddings", {"input": ["a"]})["data"]
            assert time.monotonic() - started < 2.0
            assert not any(f.done() for f in waiting)
            release.set()
            assert all(f.result(timeout=30)["choices"] for f in waiting)
    finally:
        release.set()
        proxy.terminate()
        proxy.wait(timeout=10)
        slow.shutdown()
        slow.server_close()
    recorded = [json.loads(line) for line in (tmp_path / "proxy.jsonl").read_text().splitlines()]
    forwarded = [r for r in recorded if r.get("source") == "real"]
    assert len(forwarded) == 12 and {r["turn"] for r in forwarded} == {0}


def test_a_peers_booking_takes_the_shops_words_in_any_spelling_and_refuses_the_rest() -> None:
    """The booking tool LangGraph's and Parlant's runners share books "Flat tire" on "Friday"
    as the judge reads it, with the reference a rerun gives again, and refuses an unknown
    service or day with an error naming what it takes."""
    from bench.peers.conversations import peer_booking

    assert peer_booking("c02", "Flat tire fix", " Friday") == {
        "action": "book", "service": "flat-tire", "day": "friday",
        "ref": booking_ref("c02", "flat-tire", "friday")}
    assert peer_booking("c02", "brake", "monday")["service"] == "brakes"
    for service, day in (("oil change", "monday"), ("brakes", "sunday"), ("", "")):
        refused = peer_booking("c02", service, day)
        assert set(refused) == {"error"} and "tune-up, flat-tire, brakes" in refused["error"]
