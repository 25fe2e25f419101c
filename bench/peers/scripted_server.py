"""One OpenAI-compatible server for every framework of ``make bench-peers``: it makes the
decisions each conversation needs (``conversations.py``) and records every request it gets.

Endpoints:

    POST /bench/turn              the runner says which framework, conversation and turn the
                                  requests that follow belong to (``{"framework",
                                  "conversation", "turn"}``; ``turn`` -1 is the framework's
                                  set-up); every later request is recorded under it
    POST /v1/chat/completions     answered as a model that understood the customer would:
                                  - a turnflow ``understand`` call (``response_format``
                                    schema named ``understand``): the flow the message is about
                                    scored 100, the others 0, the fields it states filled, the
                                    rest null;
                                  - a turnflow ``speak`` call: the question for the first field
                                    still pending that the message did not give, else a short
                                    acknowledgement, with the fields the message gives;
                                  - a request with ``tools`` (a ReAct agent): the turn's tool
                                    call when the last entry is the customer's, else the turn's
                                    closing reply;
                                  - anything else: ``parlant.reply`` when the framework is
                                    Parlant, else the closing reply as text
    POST /v1/embeddings           a deterministic vector per input (a hash of its words), of
                                  the ``dimensions`` asked for or 3,072
    GET  /health, /v1/models

With ``--upstream URL --upstream-for NAME,...`` the chat requests of those frameworks go to a
real model server instead (llama.cpp's, say) and its answer is recorded and returned as it
came, with the prompt tokens it reports as cached (``timings.cache_n``, or
``usage.prompt_tokens_details.cached_tokens``).

Each request is one JSON line in the ``--record`` file: the tag, the path, the body, the reply
and the arrival time. The server never sleeps: the seconds a framework takes are its own.
Standard library only.

    python -m bench.peers.scripted_server --port 8765 --record requests.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.peers.conversations import (
    CONVERSATIONS,
    final_reply,
    tool_for,
)

__all__ = ["Script", "embedding", "reply_for", "serve"]

EMBEDDING_DIMENSIONS = 3072
"""What Parlant's OpenAI embedder (text-embedding-3-large) expects when none is asked for."""
ACKNOWLEDGED = "Thank you, got it."
QUESTIONS = {"name": "May I have your first name?",
             "service": "Which service does the bike need: a tune-up, a flat-tire fix or brakes?",
             "day": "Which day suits you, Monday to Saturday?",
             "confirmed": "Could you confirm the booking (yes or no)?"}
"""What a model asks for each of the demo's fields (a field's schema description says what
the value is, not the question)."""


class Script:
    """The current tag and the recording; one per server."""

    def __init__(self, record: Path | None, upstream: str | None = None,
                 upstream_for: frozenset[str] = frozenset()) -> None:
        self.tag: dict[str, Any] = {"framework": "", "conversation": "", "turn": -1}
        self.record = record
        self.upstream, self.upstream_for = upstream, upstream_for
        # Forwarded calls wait in threads of their own, as many as a framework sends at once.
        self.forwarding = ThreadPoolExecutor(max_workers=64, thread_name_prefix="forward")
        self._writing = threading.Lock()

    def write(self, path: str, body: Any, reply: Any, headers: dict[str, str],
              tag: dict[str, Any] | None = None, **extra: Any) -> None:
        """Record one request under ``tag`` (the turn it was sent in; default: the current)."""
        if self.record is None:
            return
        line = {**(tag or self.tag), "path": path, "body": body, "reply": reply,
                "at": time.time(), "schema": headers.get("x-bench-schema"), **extra}
        with self._writing, self.record.open("a") as sink:
            sink.write(json.dumps(line) + "\n")


def _turn(tag: dict[str, Any]) -> tuple[str, int] | None:
    conversation, turn = tag.get("conversation"), tag.get("turn")
    if conversation in CONVERSATIONS and isinstance(turn, int) and \
            0 <= turn < len(CONVERSATIONS[conversation]):
        return str(conversation), turn
    return None


def _schema_of(body: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    wanted = (body.get("response_format") or {}).get("json_schema") or {}
    return wanted.get("name"), wanted.get("schema") or {}


FLOW_OF_KIND = {"request": "booking", "hours": "hours"}


def understand_reply(schema: dict[str, Any], conversation: str, turn: int) -> dict[str, Any]:
    """turnflow's understand envelope: every section the schema asks for, filled as the turn
    means it."""
    said = CONVERSATIONS[conversation][turn]
    out: dict[str, Any] = {}
    for section, spec in (schema.get("properties") or {}).items():
        props = (spec or {}).get("properties") if isinstance(spec, dict) else None
        if not isinstance(props, dict):
            out[section] = None
            continue
        if section == "flows":
            out[section] = {flow: 100 if FLOW_OF_KIND.get(said.kind) == flow else 0
                            for flow in props}
        else:
            out[section] = {key: said.states.get(key) for key in props}
    return out


def speak_reply(schema: dict[str, Any], conversation: str, turn: int) -> dict[str, Any]:
    """turnflow's speak envelope: the question for the first field the step still needs that
    this message did not give (its ``description`` is the field's ask), else an
    acknowledgement; and each asked field the message gives."""
    said = CONVERSATIONS[conversation][turn]
    props = schema.get("properties") or {}
    out: dict[str, Any] = {key: said.states.get(key) for key in props if key != "message"}
    missing = [key for key in out if out[key] is None]
    if missing:
        ask = QUESTIONS.get(missing[0]) or str((props[missing[0]] or {}).get("description")
                                               or f"What is your {missing[0]}?")
        out["message"] = ask
    else:
        out["message"] = ACKNOWLEDGED
    return out


def _tool_call(name: str, arguments: dict[str, Any], index: int) -> dict[str, Any]:
    return {"id": f"call_{index}_{name}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def react_reply(body: dict[str, Any], conversation: str, turn: int) -> dict[str, Any]:
    """A tool-calling agent's next step: the turn's tool when the customer spoke last (and the
    tool is offered), else the closing reply."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    wanted = tool_for(conversation, turn)
    offered = {((tool or {}).get("function") or {}).get("name") for tool in body.get("tools") or []}
    if last.get("role") == "user" and wanted is not None and wanted[0] in offered:
        return {"role": "assistant", "content": None,
                "tool_calls": [_tool_call(wanted[0], wanted[1], len(messages))]}
    return {"role": "assistant", "content": final_reply(conversation, turn)}


def reply_for(body: dict[str, Any], tag: dict[str, Any],
              schema_hint: str | None = None) -> dict[str, Any]:
    """The assistant message that answers one chat-completions request under ``tag``."""
    where = _turn(tag)
    name, schema = _schema_of(body)
    if where is None:  # set-up calls (Parlant evaluates its guidelines before any turn)
        if tag.get("framework") == "parlant":
            from bench.peers import parlant_script

            return {"role": "assistant", "content": json.dumps(
                parlant_script.reply(body, schema_hint, None, None))}
        return {"role": "assistant", "content": "{}"}
    conversation, turn = where
    if name == "understand":
        return {"role": "assistant",
                "content": json.dumps(understand_reply(schema, conversation, turn))}
    if name == "speak":
        return {"role": "assistant",
                "content": json.dumps(speak_reply(schema, conversation, turn))}
    if body.get("tools"):
        return react_reply(body, conversation, turn)
    if tag.get("framework") == "parlant":
        from bench.peers import parlant_script

        return {"role": "assistant", "content": json.dumps(
            parlant_script.reply(body, schema_hint, conversation, turn))}
    return {"role": "assistant", "content": final_reply(conversation, turn)}


def embedding(text: str, dimensions: int) -> list[float]:
    """A unit vector from the hashes of the text's words: equal texts, equal vectors; texts
    sharing words point closer together."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9]+", text.lower()) or [""]:
        digest = hashlib.sha256(word.encode()).digest()
        for i in range(0, 16, 4):
            slot = int.from_bytes(digest[i:i + 4], "big") % dimensions
            vector[slot] += 1.0 if digest[i] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {"id": "scripted", "object": "chat.completion", "created": int(time.time()),
            "model": "scripted", "choices": [{"index": 0, "finish_reason": finish,
                                              "message": message}],
            # Counted by the bench from the recording, with one tokenizer for every framework.
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
                      "prompt_tokens_details": {"cached_tokens": 0}}}


def _embeddings(body: dict[str, Any]) -> dict[str, Any]:
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else [str(t) for t in inputs or []]
    dimensions = body.get("dimensions") or EMBEDDING_DIMENSIONS
    return {"object": "list", "model": body.get("model", "scripted"),
            "data": [{"object": "embedding", "index": i, "embedding": embedding(t, dimensions)}
                     for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def server_cached(payload: dict[str, Any]) -> int | None:
    """The prompt tokens a real server says it took from its cache, when it says."""
    timings = payload.get("timings")
    if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
        return int(timings["cache_n"])
    details = (payload.get("usage") or {}).get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return int(details["cached_tokens"])
    return None


def forwarded(upstream: str, body: dict[str, Any]) -> dict[str, Any]:
    """The real server's answer to one chat request."""
    request = urllib.request.Request(f"{upstream.rstrip('/')}/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=900) as response:
        return dict(json.loads(response.read()))


def _forwards(script: Script, method: str, path: str) -> bool:
    """Whether this request goes on to the real model (and so waits for it)."""
    return bool(method == "POST" and path.endswith("/chat/completions") and script.upstream
                and script.tag.get("framework") in script.upstream_for)


def answer(script: Script, method: str, path: str, body: Any,
           headers: dict[str, str]) -> tuple[int, Any]:
    """(status, payload) for one request; records it."""
    if method == "GET" and path.endswith("/health"):
        return 200, {"status": "ok"}
    if method == "GET" and path.endswith("/models"):
        return 200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
    if method == "POST" and path == "/bench/turn":
        script.tag = {"framework": body.get("framework", ""),
                      "conversation": body.get("conversation", ""),
                      "turn": body.get("turn", -1)}
        return 200, {"ok": True}
    if method == "POST" and path == "/bench/schema":
        from bench.peers import parlant_script

        parlant_script.SCHEMAS[str(body.get("name"))] = dict(body.get("schema") or {})
        return 200, {"ok": True}
    if _forwards(script, method, path):
        sent_in = dict(script.tag)  # the reply may come back after the next turn's tag
        payload = forwarded(script.upstream, body)
        message = ((payload.get("choices") or [{}])[0]).get("message") or {}
        script.write(path, body, message, headers, tag=sent_in, source="real",
                     server_cached=server_cached(payload),
                     server_prompt_tokens=(payload.get("usage") or {}).get("prompt_tokens"))
        return 200, payload
    if method == "POST" and path.endswith("/chat/completions"):
        message = reply_for(body, script.tag, headers.get("x-bench-schema"))
        script.write(path, body, message, headers)
        return 200, _completion(message)
    if method == "POST" and path.endswith("/embeddings"):
        payload = _embeddings(body)
        script.write(path, body, {"vectors": len(payload["data"])}, headers)
        return 200, payload
    return 404, {"error": {"message": f"no {method} {path}"}}


async def _answer(script: Script, method: str, path: str, body: Any,
                  headers: dict[str, str]) -> tuple[int, Any]:
    # A forwarded request waits for a real model, minutes when a framework sends many at once
    # (Parlant's guideline matching): in a thread of its own, so the loop, and the quick
    # requests answered on it (a turn's tag, a schema, embeddings), never wait behind it.
    if _forwards(script, method, path):
        return await asyncio.get_running_loop().run_in_executor(
            script.forwarding, answer, script, method, path, body, headers)
    return answer(script, method, path, body, headers)


async def _handle(script: Script, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    try:
        while True:  # keep-alive: the OpenAI clients reuse their connections
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length") or 0)
            raw = await reader.readexactly(length) if length else b""
            try:
                body = json.loads(raw) if raw else {}
                status, payload = await _answer(script, method, path.split("?")[0], body,
                                                headers)
            except Exception as exc:  # a bad request gets a 500 saying why
                status, payload = 500, {"error": {"message": f"{type(exc).__name__}: {exc}"}}
                print(f"scripted server: {method} {path}: {exc!r}", file=sys.stderr, flush=True)
            data = json.dumps(payload).encode()
            writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve(port: int, record: Path | None, upstream: str | None = None,
                upstream_for: frozenset[str] = frozenset()) -> None:
    script = Script(record, upstream, upstream_for)
    server = await asyncio.start_server(lambda r, w: _handle(script, r, w), "127.0.0.1", port,
                                        reuse_address=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", type=Path, default=None)
    parser.add_argument("--upstream", default=None, help="a real model server's /v1 URL")
    parser.add_argument("--upstream-for", default="", help="frameworks sent to it, by name")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.record, args.upstream,
                      frozenset(f for f in args.upstream_for.split(",") if f)))


if __name__ == "__main__":
    main()
