"""A typical turn, as the consume service saves it, for the capacity benchmark and the search
size test: a customer's message of about 70 characters with its channel id and time, two
replies of about 120 characters each with the fields the service sends, the outcome lines of a
flow step, a run started, the model recording of an envelope-level turn, the history entries
the save builds. Its bytes in the turn log are what one turn of a small support conversation
costs; the figures in bench/README.md are per turn of this shape.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from store import OutboxEntry, SaveRequest, SourceRecord, TurnRecord

__all__ = ["CUSTOMER", "REPLIES", "turn_request"]

CUSTOMER = (
    "Oi, queria remarcar a minha consulta de quinta para sexta de manhã, o meu nome é {name}",
)
REPLIES = (
    "Claro, {name}! Tenho sexta às 9h30 ou às 11h00 com a Dra. Marta. Qual prefere? "
    "Posso também ver outro dia, se preferir.",
    "Assim que escolher, confirmo a marcação e envio-lhe um lembrete na véspera por aqui.",
)


def turn_request(session_id: str, version: int, *, n: int, at: datetime | None = None,
                 partition: int = 0) -> SaveRequest:
    """Turn ``version`` of ``session_id`` (``n`` makes its words and ids unique)."""
    name = f"Cliente {n}"
    input_id = f"wamid.HBgMNTUxMTk5OTk{n:012d}AgARGBI"
    turn_input: dict[str, Any] = {
        "session_id": session_id, "message": CUSTOMER[0].format(name=name), "id": input_id,
        "at": "2026-12-06T09:14:07.512Z",
    }
    messages = [
        {"session_id": session_id, "key": f"{session_id}:{version}:{i}", "kind": "ai",
         "text": text.format(name=name), "after_ms": 800 * i, "run_id": "r1",
         "step_id": "offer_slots", "input_id": input_id, "version": version}
        for i, text in enumerate(REPLIES)
    ]
    outcomes = [
        {"code": "understood", "run_id": "r1", "flow_id": "reschedule", "step_id": "ask_day",
         "fields": ["day", "name"]},
        {"code": "moved", "run_id": "r1", "flow_id": "reschedule", "step_id": "offer_slots"},
        {"code": "asked", "run_id": "r1", "flow_id": "reschedule", "step_id": "offer_slots"},
    ]
    recording = {
        "v": 1, "level": "envelopes", "fields": {"day": "sexta", "name": name},
        "calls": [{"kind": "understand", "ok": True, "tokens": [912, 41], "ms": 640,
                   "reply": {"json": {"intent": "reschedule", "day": "sexta"}}},
                  {"kind": "speak", "ok": True, "tokens": [1104, 58], "ms": 910,
                   "reply": {"text": messages[0]["text"]}}],
    }
    return SaveRequest(
        session_id=session_id,
        expected_version=version - 1,
        state={"id": session_id, "v": 4, "version": version, "seq": version,
               "data": {"name": name, "day": "sexta"}, "runs": []},
        turn=TurnRecord(
            input=turn_input, messages=messages, outcomes=outcomes,
            started=[{"run_id": "r1", "flow_id": "reschedule"}] if version == 1 else [],
            llm_calls=2, source=SourceRecord("inbound.turns", partition, n),
            input_id=input_id, created_at=at, clock_at=at, model_calls=recording,
        ),
        outbox=[OutboxEntry(topic="outbound.messages", key=session_id, payload=m)
                for m in messages],
    )
