"""Replaying logged conversations against an agent: what a change does to real conversations.

The turn log holds every input, the time the engine ran it at, what the model answered
(``MODEL_RECORDING``) and what the turn produced. A replay runs the inputs again, in order, on
that clock, against a new agent, with the model's recorded replies, and reports the first turn
where each conversation departs from what happened. Imports go one way: this package uses the
engine and the store; neither knows it exists.
"""

from replay.compare import ASPECTS, Difference
from replay.conversations import Conversation, Recorded, RecordedTurn
from replay.recorder import record_conversation
from replay.runner import ConversationReport, Departure, replay_conversation
from replay.tape_provider import TapeProvider, UnrecordedCall

__all__ = [
    "ASPECTS",
    "Conversation",
    "ConversationReport",
    "Departure",
    "Difference",
    "Recorded",
    "RecordedTurn",
    "TapeProvider",
    "UnrecordedCall",
    "record_conversation",
    "replay_conversation",
]
