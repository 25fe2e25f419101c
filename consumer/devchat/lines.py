"""What a line typed (or scripted) into a chat means: a message, a burst, an event, a wait or
the end. Shared by ``turnflow dev``'s terminal and the inspector's test console, so the two read
the same line the same way."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HELP", "ChatLine", "parse_chat_line", "parse_chat_lines"]


@dataclass(frozen=True)
class ChatLine:
    """One parsed chat or script line."""

    kind: str  # "message" | "burst" | "event" | "wait" | "quit" | "skip"
    text: str = ""
    seconds: float = 0.0
    event: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    messages: tuple[str, ...] = ()  # a burst's messages, oldest first


HELP = (
    "Type a message. /burst A | B | C sends several messages at once (so does pasting several "
    "lines), /event NAME [JSON] sends an event, /wait SECONDS waits (timers keep firing), "
    "/quit leaves."
)


def parse_chat_line(line: str) -> ChatLine:
    """Read one line: a message, or a ``/command``. Raises ``ValueError`` on a bad command."""
    text = line.strip()
    if not text or text.startswith("#"):
        return ChatLine("skip")
    if not text.startswith("/"):
        return ChatLine("message", text=text)
    command, _, rest = text.partition(" ")
    rest = rest.strip()
    if command in ("/quit", "/exit"):
        return ChatLine("quit")
    if command == "/burst":
        messages = tuple(part.strip() for part in rest.split("|") if part.strip())
        if not messages:
            raise ValueError("/burst needs messages separated by |, e.g. /burst hi | I'm Lee")
        return ChatLine("burst", messages=messages)
    if command == "/wait":
        try:
            seconds = float(rest)
        except ValueError:
            raise ValueError(f"/wait needs a number of seconds, got {rest!r}") from None
        if seconds < 0:
            raise ValueError("/wait needs a non-negative number of seconds")
        return ChatLine("wait", seconds=seconds)
    if command == "/event":
        name, _, raw = rest.partition(" ")
        if not name:
            raise ValueError("/event needs a name, e.g. /event paid {\"amount\": 10}")
        payload: Any = {}
        if raw.strip():
            try:
                payload = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"/event payload is not JSON: {exc.msg}") from None
            if not isinstance(payload, dict):
                raise ValueError("/event payload must be a JSON object")
        return ChatLine("event", event=name, payload=payload)
    raise ValueError(f"unknown command {command}; {HELP}")


def parse_chat_lines(chunk: str) -> list[ChatLine | ValueError]:
    """Read what arrived at once (several lines pasted together): each line as
    ``parse_chat_line`` reads it, except that plain messages next to each other go out together
    as one burst, as a customer typing fast sends them. A bad command is returned as its error,
    in its place."""
    parsed: list[ChatLine | ValueError] = []
    for raw in chunk.split("\n"):
        try:
            line = parse_chat_line(raw)
        except ValueError as exc:
            parsed.append(exc)
            continue
        if line.kind == "skip":
            continue
        previous = parsed[-1] if parsed else None
        if line.kind == "message" and isinstance(previous, ChatLine) and previous.kind in (
            "message", "burst"
        ):
            earlier = previous.messages or (previous.text,)
            parsed[-1] = ChatLine("burst", messages=(*earlier, line.text))
            continue
        parsed.append(line)
    return parsed
