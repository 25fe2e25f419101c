"""Small builders for store tests: a save request with sensible defaults."""

from __future__ import annotations

from typing import Any

from store import OutboxEntry, SaveRequest, SourceRecord, TurnRecord


def save_request(
    session_id: str,
    expected_version: int,
    *,
    state: dict[str, Any] | None = None,
    message: str | None = "oi",
    replies: list[str] | None = None,
    outbox: int = 1,
    source: SourceRecord | None = None,
    input_id: str | None = None,
) -> SaveRequest:
    """A save of one turn: `message` in (None for a wake), `replies` out, `outbox` rows."""
    turn_input: dict[str, Any] = {"session_id": session_id}
    if message is None:
        turn_input["wake"] = "k"
    else:
        turn_input["message"] = message
    replies = replies or []
    version = expected_version + 1
    return SaveRequest(
        session_id=session_id,
        expected_version=expected_version,
        state=state if state is not None else {"id": session_id, "data": {"v": version}},
        turn=TurnRecord(
            input=turn_input,
            messages=[{"kind": "ai", "text": text, "key": f"{version}-{i}"}
                      for i, text in enumerate(replies)],
            llm_calls=len(replies),
            source=source,
            input_id=input_id,
        ),
        outbox=[
            OutboxEntry(topic="outbound.messages", key=session_id,
                        payload={"version": version, "n": i})
            for i in range(outbox)
        ],
    )
