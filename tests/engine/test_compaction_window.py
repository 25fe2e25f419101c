"""Compaction reuses its summary when the host passes a sliding window of the transcript."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engine import Agent, FakeClock, MockProvider, ModelResponse

FLOWS = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "t", "prompt": "p"}]}]


def window(start: int, count: int) -> list[dict[str, Any]]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {
            "role": ("user", "assistant")[i % 2],
            "text": f"E{i:03d} " + "x" * 100,
            "at": (base + timedelta(minutes=i)).isoformat(),
        }
        for i in range(start, start + count)
    ]


async def test_summary_is_reused_across_a_shifted_window() -> None:
    """The summary is kept with what it covers, so later turns reuse it and summarize again only
    when the part it does not cover grows past the limit."""
    provider = MockProvider(
        [ModelResponse(json={"summary": "RESUMO"}), {"message": "um"}, {"message": "dois"}]
    )
    agent = Agent(
        name="Ana",
        provider=provider,
        clock=FakeClock("2026-01-05T09:00:00Z"),
        flows=FLOWS,
        compaction={"keep_last": 10, "max_chars": 600},
    )
    first = await agent.turn(
        {"session_id": "s1", "message": "oi", "id": "m1", "history": window(0, 30)}
    )
    assert first.llm_calls == 2
    stored = first.session.metadata["compaction"]
    assert stored["summary"] == "RESUMO" and stored["covers_at"] is not None
    second = await agent.turn(
        {
            "session_id": "s1",
            "message": "e aí",
            "id": "m2",
            "session": first.session,
            "history": window(2, 30),
        }
    )
    assert second.llm_calls == 1
    spoken = "\n".join(m.text for m in provider.calls[2].messages)
    assert "RESUMO" in spoken and "E031" in spoken
