"""LangGraph's side of ``make bench-peers``: its prebuilt ReAct agent (``create_react_agent``)
with tools for the demo's job, ``ChatOpenAI`` pointed at the scripted server, over every
conversation of ``conversations.py``. Runs in the peers' own environment (bench/peers/.venv).

One thread per conversation in an in-memory checkpointer: each customer message is one
``invoke`` with that message, as a chat front end uses the agent; the agent keeps the history.

    bench/peers/.venv/bin/python bench/peers/run_langgraph.py --base-url URL --out rows.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from bench.peers.conversations import CONVERSATIONS, HOURS, booking_ref
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
CURRENT = {"conversation": ""}


@tool
def opening_hours() -> str:
    """The shop's opening hours."""
    return HOURS


@tool
def book_repair(service: str, day: str, name: str | None = None) -> dict[str, str]:
    """Book a repair. service: tune-up, flat-tire or brakes; day: monday to saturday; name:
    the customer's first name if known. Returns the booking reference."""
    return {"booking_ref": booking_ref(CURRENT["conversation"], service, day),
            "status": "booked, awaiting payment"}


@tool
def check_payment(booking_ref: str) -> dict[str, str]:
    """Whether the booking's payment has arrived."""
    return {"booking_ref": booking_ref, "status": "paid"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    timings = Timings(args.out, FRAMEWORK)
    model = ChatOpenAI(model="scripted", base_url=args.base_url, api_key="unused",
                       temperature=0, max_retries=0)
    agent = create_react_agent(model, [opening_hours, book_repair, check_payment],
                               prompt=PROMPT, checkpointer=InMemorySaver())
    for cid, turns in CONVERSATIONS.items():
        CURRENT["conversation"] = cid
        config = {"configurable": {"thread_id": cid}}
        said: list[str] = []
        for index, turn in enumerate(turns):
            tag(args.base_url, FRAMEWORK, cid, index)
            with timings.turn(cid, index, kind=turn.kind) as row:
                state = agent.invoke({"messages": [("user", turn.text)]}, config)
                reply = str(state["messages"][-1].content)
                row["replies"] = [reply]
            said.append(reply)
        print(f"langgraph {cid}: " + " | ".join(said), flush=True)


if __name__ == "__main__":
    main()
