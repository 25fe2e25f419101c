"""The eight phases of a turn, one module each, in the order ``Agent.turn`` calls them."""

from engine.phases import advance, decide, finish, ingest, load, settle, speak, understand

__all__ = ["advance", "decide", "finish", "ingest", "load", "settle", "speak", "understand"]
