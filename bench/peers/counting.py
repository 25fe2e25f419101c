"""Counting what each framework sent the scripted server: model calls, prompt and completion
tokens with one tokenizer for all, the prompt tokens a one-slot prefix cache would serve, per
customer turn; and the table, the ratios and the verdict of ``make bench-peers``.

A request's prompt is every part of its body a server turns into model input: each message (its
role, its text, the tool calls it carries), the tool definitions, and the response format's
schema. It is rendered as one text the same way for every framework and tokenized by one
tokenizer (``Tokenizer``: in the bench, llama.cpp's ``/tokenize`` with the packaged SmolLM2
model). The cached part of a prompt is its longest common token prefix with the framework's
previous chat request: what a llama.cpp slot serving that framework's calls in turn keeps; for
a request a real server answered, the count that server reported (in its own tokens).
Embedding requests are counted apart, not as model calls. Standard library only.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conversation", "TurnCount", "completion_text", "count", "prompt_text",
           "summarize", "table", "verdict"]

Tokenizer = Callable[[str], list[int]]


def _content(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def schema_text(body: dict[str, Any]) -> str:
    """The response format's schema part of ``prompt_text`` (empty when there is none): a
    server that turns the schema into a grammar (llama.cpp's) never puts it in the prompt,
    so it is also counted apart."""
    fmt = body.get("response_format") if isinstance(body, dict) else None
    if isinstance(fmt, dict) and (fmt.get("json_schema") or fmt.get("schema")):
        return "<|format|>\n" + json.dumps(fmt)
    return ""


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt a chat-completions body asks the model to read, as one text."""
    parts: list[str] = []
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        entry = f"<|{message.get('role', '')}|>\n{_content(message.get('content'))}"
        if message.get("tool_calls"):
            entry += "\n" + json.dumps(message["tool_calls"])
        if message.get("tool_call_id"):
            entry += f"\n[{message['tool_call_id']}]"
        parts.append(entry)
    if not isinstance(body, dict):
        return "\n".join(parts)
    if body.get("tools"):
        parts.append("<|tools|>\n" + json.dumps(body["tools"]))
    if schema_text(body):
        parts.append(schema_text(body))
    return "\n".join(parts)


def completion_text(reply: dict[str, Any]) -> str:
    """What the model answered: its text and any tool calls."""
    if not isinstance(reply, dict):
        return ""
    text = _content(reply.get("content"))
    if reply.get("tool_calls"):
        text += json.dumps(reply["tool_calls"])
    return text


def common_prefix(a: list[int], b: list[int]) -> int:
    n, i = min(len(a), len(b)), 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class TurnCount:
    """One framework's cost for one customer turn."""

    framework: str
    conversation: str
    turn: int
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_basis_tokens: int = 0
    """What ``cached_tokens`` is a share of: the prompt tokens, or for a real server's count
    the prompt tokens that server reported (in its own tokens)."""
    schema_tokens: int = 0
    server_prompt_tokens: int = 0
    """The prompt tokens a real server reported reading (its tokenizer, its chat template)."""
    embedding_calls: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def count(requests: Iterable[dict[str, Any]], rows: Iterable[dict[str, Any]],
          tokenize: Tokenizer) -> dict[tuple[str, str, int], TurnCount]:
    """Per (framework, conversation, turn): the recorded requests counted, the runner's timing
    rows joined. Requests outside a turn (a framework's set-up) are left out; turns a runner
    timed but that sent nothing count zero calls."""
    counts: dict[tuple[str, str, int], TurnCount] = {}

    def at(framework: str, conversation: str, turn: int) -> TurnCount:
        key = (framework, conversation, turn)
        if key not in counts:
            counts[key] = TurnCount(framework, conversation, turn)
        return counts[key]

    previous: dict[str, list[int]] = {}
    for request in requests:
        framework = str(request.get("framework", ""))
        path = str(request.get("path", ""))
        in_turn = isinstance(request.get("turn"), int) and request["turn"] >= 0
        if path.endswith("/embeddings"):
            if in_turn:
                at(framework, request["conversation"], request["turn"]).embedding_calls += 1
            continue
        body = request.get("body") or {}
        tokens = tokenize(prompt_text(body))
        cached, basis = common_prefix(previous.get(framework, []), tokens), len(tokens)
        if isinstance(request.get("server_cached"), int) and \
                isinstance(request.get("server_prompt_tokens"), int):  # a real server's count
            cached, basis = request["server_cached"], request["server_prompt_tokens"]
        previous[framework] = tokens
        if not in_turn:
            continue
        counted = at(framework, request["conversation"], request["turn"])
        counted.calls += 1
        counted.prompt_tokens += len(tokens)
        counted.cached_tokens += cached
        counted.cache_basis_tokens += basis
        counted.schema_tokens += len(tokenize(schema_text(body))) if schema_text(body) else 0
        if isinstance(request.get("server_prompt_tokens"), int):
            counted.server_prompt_tokens += request["server_prompt_tokens"]
        counted.completion_tokens += len(tokenize(completion_text(request.get("reply") or {})))
    for row in rows:
        counted = at(str(row["framework"]), str(row["conversation"]), int(row["turn"]))
        counted.seconds += float(row.get("seconds", 0.0))
        counted.cpu_seconds += float(row.get("cpu_seconds", 0.0))
    return counts


@dataclass
class Conversation:
    """One framework's totals over one conversation."""

    framework: str
    conversation: str
    turns: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_basis_tokens: int = 0
    schema_tokens: int = 0
    server_prompt_tokens: int = 0
    embedding_calls: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    per_turn_calls: list[int] = field(default_factory=list)

    def per_turn(self, value: float) -> float:
        return value / self.turns if self.turns else 0.0


def summarize(counts: dict[tuple[str, str, int], TurnCount]) -> dict[tuple[str, str],
                                                                    Conversation]:
    """Per (framework, conversation): the sums of its turns."""
    out: dict[tuple[str, str], Conversation] = {}
    for (framework, conversation, _), counted in sorted(counts.items()):
        total = out.setdefault((framework, conversation), Conversation(framework, conversation))
        total.turns += 1
        total.calls += counted.calls
        total.prompt_tokens += counted.prompt_tokens
        total.completion_tokens += counted.completion_tokens
        total.cached_tokens += counted.cached_tokens
        total.cache_basis_tokens += counted.cache_basis_tokens
        total.schema_tokens += counted.schema_tokens
        total.server_prompt_tokens += counted.server_prompt_tokens
        total.embedding_calls += counted.embedding_calls
        total.seconds += counted.seconds
        total.cpu_seconds += counted.cpu_seconds
        total.per_turn_calls.append(counted.calls)
    return out


def _merged(rows: list[Conversation], framework: str) -> Conversation:
    total = Conversation(framework, "all")
    for row in rows:
        for name in ("turns", "calls", "prompt_tokens", "completion_tokens", "cached_tokens",
                     "cache_basis_tokens", "schema_tokens", "server_prompt_tokens",
                     "embedding_calls", "seconds", "cpu_seconds"):
            setattr(total, name, getattr(total, name) + getattr(row, name))
        total.per_turn_calls += row.per_turn_calls
    return total


def table(summary: dict[tuple[str, str], Conversation], frameworks: list[str],
          sources: dict[str, str]) -> str:
    """The Markdown table: one row per framework over all conversations, then one per
    framework and conversation."""
    head = ("| conversation | framework | source | turns | model calls / turn (max) | "
            "prompt tokens / turn | of which response schema | completion tokens / turn | "
            "cached prompt share | embedding calls | seconds / turn | "
            "framework CPU ms / turn |\n"
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    conversations = sorted({c for _, c in summary})
    order = [("all", fw) for fw in frameworks] + [(c, fw) for c in conversations
                                                   for fw in frameworks]
    for conversation, framework in order:
        if conversation == "all":
            rows = [summary[k] for k in summary if k[0] == framework]
            if not rows:
                continue
            row = _merged(rows, framework)
        elif (framework, conversation) in summary:
            row = summary[(framework, conversation)]
        else:
            continue
        share = row.cached_tokens / row.cache_basis_tokens if row.cache_basis_tokens else 0.0
        lines.append(
            f"| {conversation} | {framework} | {sources.get(framework, '')} | {row.turns} | "
            f"{row.per_turn(row.calls):.2f} ({max(row.per_turn_calls, default=0)}) | "
            f"{row.per_turn(row.prompt_tokens):,.0f} | {row.per_turn(row.schema_tokens):,.0f} | "
            f"{row.per_turn(row.completion_tokens):,.0f}"
            f" | {share:.0%} | {row.embedding_calls} | {row.per_turn(row.seconds):.3f} | "
            f"{1000 * row.per_turn(row.cpu_seconds):.1f} |")
    return "\n".join(lines)


def verdict(summary: dict[tuple[str, str], Conversation], ours: str,
            peers: list[str]) -> tuple[str, dict[str, dict[str, bool]]]:
    """The ratios ours / peer per conversation (model calls per turn, prompt tokens per turn),
    as a Markdown table, and per peer whether ours is lower on every conversation."""
    conversations = sorted({c for fw, c in summary if fw == ours})
    present = [p for p in peers if any(fw == p for fw, _ in summary)]
    head = "| conversation | " + " | ".join(
        f"calls/turn {ours} ÷ {p} | prompt tokens/turn {ours} ÷ {p}" for p in present) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(present)]
    fewer: dict[str, dict[str, bool]] = {p: {"calls": True, "prompt_tokens": True}
                                         for p in present}
    for conversation in conversations:
        mine = summary[(ours, conversation)]
        cells = []
        for peer in present:
            theirs = summary.get((peer, conversation))
            if theirs is None or not theirs.calls:
                cells += ["-", "-"]
                fewer[peer] = {"calls": False, "prompt_tokens": False}
                continue
            calls = mine.per_turn(mine.calls) / theirs.per_turn(theirs.calls)
            tokens = mine.per_turn(mine.prompt_tokens) / theirs.per_turn(theirs.prompt_tokens)
            fewer[peer]["calls"] &= calls < 1
            fewer[peer]["prompt_tokens"] &= tokens < 1
            cells += [f"{calls:.2f}", f"{tokens:.2f}"]
        lines.append(f"| {conversation} | " + " | ".join(cells) + " |")
    return "\n".join(lines), fewer


def grouped(requests: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Chat requests per framework, set-up included (for the log)."""
    out: dict[str, int] = defaultdict(int)
    for request in requests:
        if str(request.get("path", "")).endswith("/chat/completions"):
            out[str(request.get("framework"))] += 1
    return dict(out)
