"""Turns for the consumer's pipeline run in-process (no broker): an input as the consumer has
it once read and parsed, and the outbound topics the pipeline writes to."""

from __future__ import annotations

from consumer.turns.parser import ParsedInput, parse_record
from consumer.turns.pipeline import OutboundTopics, TurnWork
from store import SourceRecord

__all__ = ["TOPICS", "turn_work"]

TOPICS = OutboundTopics(messages="outbound.messages", schedule="outbound.schedule")


def turn_work(session_id: str, text: str, offset: int, topic: str = "inbound.turns") -> TurnWork:
    """A message ``text`` for the session, read at ``offset`` of ``topic``'s partition 0."""
    raw = f'{{"session_id": "{session_id}", "message": "{text}", "id": "{text}-{offset}"}}'
    parsed = parse_record(session_id.encode(), raw.encode(), max_bytes=10_000)
    assert isinstance(parsed, ParsedInput), parsed
    return TurnWork(parsed=parsed, source=SourceRecord(topic, 0, offset))
