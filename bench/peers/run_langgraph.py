"""LangGraph's side of ``make bench-peers``: its prebuilt ReAct agent (``create_react_agent``)
with tools for the demo's job, ``ChatOpenAI`` pointed at the scripted server, over every
conversation of ``conversations.py``. Runs in the peers' own environment (bench/peers/.venv).

One thread per conversation in an in-memory checkpointer: each customer message is one
``invoke`` with that message, as a chat front end uses the agent; the agent keeps the history.

Each turn's row records what the tools did (``actions``: a booking made, a payment checked), so
``outcomes.py`` judges the conversation the same way as turnflow's. The booking tool accepts a
service or day in any case or spacing ("Flat tire", "Friday") and refuses anything else with a
message the model reads, as the demo's own booking action refuses what it cannot book.

With ``--framework langgraph-real --model NAME`` the same agent runs on a real model (the
bench sends its calls on to llama.cpp's server): a turn that fails (a reply the client cannot
read, the agent's step limit) is recorded with its error and the conversation goes on.

    bench/peers/.venv/bin/python -m bench.peers.run_langgraph --base-url URL --out rows.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from bench.peers.conversations import CONVERSATIONS, HOURS, peer_booking
from bench.peers.timing import Timings, tag

FRAMEWORK = "langgraph"
PROMPT = (
    "You are Ana, the friendly front desk of Spoke & Chain, a small bike-repair shop. Short, "
    "plain sentences. Goal: book repairs and answer simple questions about the shop. "
    "Services: tune-up, flat-tire, brakes. Days: Monday to Saturday. To book, learn the "
    "service and the day, say the booking back and ask the customer to confirm; only after a "
    "yes call book_repair. A customer may change the day before confirming. After booking, the "
    "customer pays online; when they say they paid, call check_payment. For opening hours call "
    "opening_hours."
)
CURRENT: dict[str, Any] = {"conversation": "", "actions": []}
STEP_LIMIT = 12
"""The graph's recursion limit on a real model (LangGraph's default is 25): about five tool
calls a turn, so a model that loops costs a bounded number of calls."""


@tool
def opening_hours() -> str:
    """The shop's opening hours."""
    return HOURS


@tool
def book_repair(service: str, day: str, name: str | None = None) -> dict[str, str]:
    """Book a repair. service: tune-up, flat-tire or brakes; day: monday to saturday; name:
    the customer's first name if known. Returns the booking reference."""
    booked = peer_booking(CURRENT["conversation"], service, day)
    if "error" in booked:
        return booked
    CURRENT["actions"].append(booked)
    return {"booking_ref": booked["ref"], "status": "booked, awaiting payment"}


@tool
def check_payment(booking_ref: str) -> dict[str, str]:
    """Whether the booking's payment has arrived."""
    CURRENT["actions"].append({"action": "pay", "ref": booking_ref})
    return {"booking_ref": booking_ref, "status": "paid"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--framework", default=FRAMEWORK, help="the name its rows carry")
    parser.add_argument("--conversations", default="", help="a subset, comma-separated")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a call may take")
    args = parser.parse_args()
    chosen = [c for c in args.conversations.split(",") if c] or list(CONVERSATIONS)
    unknown = [c for c in chosen if c not in CONVERSATIONS]
    if unknown:
        parser.error(f"no conversation {', '.join(unknown)}")
    real = args.model != "scripted"
    timings = Timings(args.out, args.framework)
    model = ChatOpenAI(model=args.model, base_url=args.base_url, api_key="unused",
                       temperature=0, max_retries=0, timeout=args.timeout)
    agent = create_react_agent(model, [opening_hours, book_repair, check_payment],
                               prompt=PROMPT, checkpointer=InMemorySaver())
    for cid in chosen:
        CURRENT["conversation"] = cid
        config: dict[str, Any] = {"configurable": {"thread_id": cid}}
        if real:
            config["recursion_limit"] = STEP_LIMIT
        said: list[str] = []
        for index, turn in enumerate(CONVERSATIONS[cid]):
            tag(args.base_url, args.framework, cid, index)
            CURRENT["actions"] = []
            with timings.turn(cid, index, kind=turn.kind) as row:
                try:
                    state = agent.invoke({"messages": [("user", turn.text)]}, config)
                    reply = str(state["messages"][-1].content)
                except Exception as exc:  # a real model's bad step: recorded, the chat goes on
                    if not real:
                        raise
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    reply = ""
                row["replies"] = [reply] if reply else []
                row["actions"] = list(CURRENT["actions"])
            said.append(reply)
        print(f"{args.framework} {cid}: " + " | ".join(said), flush=True)


if __name__ == "__main__":
    main()
