"""The ledger: what reached the outbound topics, checked against the turn log and the inputs.

``Ledger`` reads ``outbound.messages`` and ``outbound.schedule`` from the beginning (no group,
as a delivery worker replaying its topic would) and ``TurnLog`` reads the ``turns`` table. The
checks return human-readable problems, an empty list when everything holds:

- ``applied_exactly_once``: every produced input has exactly one turn that applied it (a turn
  whose outcomes are not ``duplicate-input``), and no source record appears twice in the log;
- ``every_reply_sent``: every message and timer in the turn log reached its topic;
- ``saved_before_sent``: every outbound record matches a saved turn (same session, key, version
  and text): nothing was published that the log does not hold;
- ``same_key_same_record``: records seen more than once are identical (a delivery worker that
  drops a repeated key loses nothing);
- ``keys_owned_by_one_session``: no reply or timer key was published for two sessions (a
  delivery worker dedupes on the key alone, and the scheduler must wake the right session);
- ``in_session_order``: per session, the first copies of the replies come in turn-log order
  (version, then position in the turn).

``timers_fired_once`` (for tests whose agent waits on a timer that fires) checks that no timer
woke its session twice and that each session's last timer woke it exactly once.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer

__all__ = ["Ledger", "TurnLog", "TurnRow", "check_all", "timers_fired_once"]


@dataclass(frozen=True)
class TurnRow:
    """One row of the turn log, as the checks need it."""

    session_id: str
    version: int
    input_id: str | None
    outcomes: tuple[str, ...]
    messages: tuple[dict[str, Any], ...]
    schedule: tuple[dict[str, Any], ...]
    source: tuple[str, int, int] | None
    wake: str | None = None  # the timer key of a wake, None for an input

    @property
    def applied(self) -> bool:
        return "duplicate-input" not in self.outcomes


@dataclass
class TurnLog:
    """The turn log of a set of sessions, ordered by session and version."""

    rows: list[TurnRow] = field(default_factory=list)

    @classmethod
    async def read(cls, database_url: str, session_ids: Iterable[str]) -> TurnLog:
        connection = await asyncpg.connect(database_url, timeout=10)
        try:
            records = await connection.fetch(
                "SELECT session_id, version, input, outcomes, messages, schedule, source_topic,"
                " source_partition, source_offset FROM turns WHERE session_id = ANY($1::text[])"
                " ORDER BY session_id, version",
                list(session_ids),
            )
        finally:
            await connection.close()
        rows = []
        for r in records:
            source = (
                (r["source_topic"], r["source_partition"], r["source_offset"])
                if r["source_topic"] is not None
                else None
            )
            stored_input = json.loads(r["input"])
            rows.append(TurnRow(
                session_id=r["session_id"],
                version=r["version"],
                input_id=stored_input.get("id"),
                outcomes=tuple(o.get("code", "") for o in json.loads(r["outcomes"])),
                messages=tuple(json.loads(r["messages"])),
                schedule=tuple(json.loads(r["schedule"])),
                source=source,
                wake=stored_input.get("wake"),
            ))
        return cls(rows)

    def replies(self) -> dict[tuple[str, str], tuple[int, int, dict[str, Any]]]:
        """(session, message key) -> (version, position in the turn, message)."""
        return {
            (row.session_id, m["key"]): (row.version, i, m)
            for row in self.rows
            for i, m in enumerate(row.messages)
        }


class Ledger:
    """Every record of the outbound topics, read from the beginning."""

    def __init__(self, bootstrap: str, *, messages_topic: str, schedule_topic: str) -> None:
        self._bootstrap = bootstrap
        self._topics = (messages_topic, schedule_topic)
        self.messages: list[dict[str, Any]] = []
        self.schedule: list[dict[str, Any]] = []
        # (session, key) -> broker timestamp (ms) of the reply's first copy.
        self.sent_at: dict[tuple[str, str], int] = {}

    async def read(
        self,
        *,
        until: Callable[[Ledger], bool] = lambda ledger: False,
        within: float = 30.0,
        settle: float = 1.0,
    ) -> Ledger:
        """Read both topics until ``until(self)`` holds (TimeoutError after ``within``), then
        ``settle`` seconds more for late duplicates."""
        self.messages.clear()
        self.schedule.clear()
        self.sent_at.clear()
        consumer = AIOKafkaConsumer(
            *self._topics, bootstrap_servers=self._bootstrap, group_id=None,
            auto_offset_reset="earliest", enable_auto_commit=False,
        )
        await consumer.start()
        try:
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(within):
                while not until(self):
                    await self._poll(consumer)
            end = loop.time() + settle
            while loop.time() < end:
                await self._poll(consumer)
        finally:
            await consumer.stop()
        return self

    async def _poll(self, consumer: AIOKafkaConsumer) -> None:
        batches = await consumer.getmany(timeout_ms=100)
        # Per-session order holds within a partition; keep each partition's order.
        for tp, records in sorted(batches.items(), key=lambda item: item[0].partition):
            is_reply = tp.topic == self._topics[0]
            for record in records:
                value = json.loads(record.value)
                if is_reply:
                    self.messages.append(value)
                    identity = (value["session_id"], value["key"])
                    self.sent_at.setdefault(identity, record.timestamp)
                else:
                    self.schedule.append(value)

    def texts(self, session_id: str) -> list[str]:
        """The session's reply texts, first copies only, in topic order."""
        seen: set[str] = set()
        out = []
        for m in self.messages:
            if m["session_id"] == session_id and m["key"] not in seen:
                seen.add(m["key"])
                out.append(m["text"])
        return out

    def has_replies(self, expected: dict[str, int]) -> bool:
        """True when each session has at least its expected number of distinct replies."""
        return all(len(self.texts(sid)) >= n for sid, n in expected.items())


def applied_exactly_once(log: TurnLog, inputs: Iterable[dict[str, Any]]) -> list[str]:
    problems = []
    applied = Counter((r.session_id, r.input_id) for r in log.rows if r.applied)
    for record in inputs:
        identity = (record["session_id"], record.get("id"))
        if applied[identity] != 1:
            problems.append(f"input {identity} applied {applied[identity]} times")
    sources = Counter(r.source for r in log.rows if r.source is not None)
    problems += [f"source record {s} in the log {n} times" for s, n in sources.items() if n > 1]
    return problems


def every_reply_sent(log: TurnLog, ledger: Ledger) -> list[str]:
    sent = {(m["session_id"], m["key"]) for m in ledger.messages}
    timers = {(s["session_id"], s["key"]) for s in ledger.schedule}
    problems = [
        f"reply {identity} saved but never published"
        for identity in log.replies()
        if identity not in sent
    ]
    for row in log.rows:
        for entry in row.schedule:
            if (row.session_id, entry["key"]) not in timers:
                problems.append(f"timer {(row.session_id, entry['key'])} saved, not published")
    return problems


def saved_before_sent(log: TurnLog, ledger: Ledger) -> list[str]:
    replies = log.replies()
    timers = {(row.session_id, e["key"]) for row in log.rows for e in row.schedule}
    problems = []
    for m in ledger.messages:
        saved = replies.get((m["session_id"], m["key"]))
        if saved is None:
            problems.append(f"reply {(m['session_id'], m['key'])} published, not in the log")
        elif (saved[0], saved[2]["text"]) != (m["version"], m["text"]):
            problems.append(f"reply {(m['session_id'], m['key'])} differs from the log")
    for s in ledger.schedule:
        if (s["session_id"], s["key"]) not in timers:
            problems.append(f"timer {(s['session_id'], s['key'])} published, not in the log")
    return problems


def same_key_same_record(ledger: Ledger) -> list[str]:
    first: dict[tuple[str, str, str], dict[str, Any]] = {}
    problems = []
    for topic, records in (("messages", ledger.messages), ("schedule", ledger.schedule)):
        for record in records:
            identity = (topic, record["session_id"], record["key"])
            if first.setdefault(identity, record) != record:
                problems.append(f"{identity} sent twice with different contents")
    return problems


def keys_owned_by_one_session(ledger: Ledger) -> list[str]:
    owner: dict[tuple[str, str], str] = {}
    problems = []
    for topic, records in (("messages", ledger.messages), ("schedule", ledger.schedule)):
        for record in records:
            identity = (topic, record["key"])
            first = owner.setdefault(identity, record["session_id"])
            if first != record["session_id"]:
                problems.append(
                    f"{topic} key {record['key']!r} sent for {first} and {record['session_id']}"
                )
    return problems


def in_session_order(log: TurnLog, ledger: Ledger) -> list[str]:
    replies = log.replies()
    positions: dict[str, list[tuple[int, int]]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for m in ledger.messages:
        identity = (m["session_id"], m["key"])
        if identity in seen or identity not in replies:
            continue
        seen.add(identity)
        version, index, _ = replies[identity]
        positions[m["session_id"]].append((version, index))
    return [
        f"session {sid} replies out of turn-log order: {order}"
        for sid, order in positions.items()
        if order != sorted(order)
    ]


def check_all(log: TurnLog, ledger: Ledger, inputs: Iterable[dict[str, Any]]) -> list[str]:
    """Every check of this module; the problems found, none when all hold."""
    inputs = list(inputs)
    return (
        applied_exactly_once(log, inputs)
        + every_reply_sent(log, ledger)
        + saved_before_sent(log, ledger)
        + same_key_same_record(ledger)
        + keys_owned_by_one_session(ledger)
        + in_session_order(log, ledger)
    )


def timers_fired_once(log: TurnLog, session_ids: Iterable[str]) -> list[str]:
    """No timer woke its session twice (a wake turn that ran, outcome ``no-reply``; a stale
    wake is refused as ``stale-wake``), and the last timer each session set woke it once."""
    fired = Counter(
        (r.session_id, r.wake) for r in log.rows if r.wake is not None and "no-reply" in r.outcomes
    )
    problems = [f"timer {key} woke its session {n} times" for key, n in fired.items() if n > 1]
    for sid in session_ids:
        timers = [e["key"] for r in log.rows if r.session_id == sid for e in r.schedule
                  if e.get("at")]
        if not timers:
            problems.append(f"session {sid} set no timer")
        elif fired[(sid, timers[-1])] != 1:
            problems.append(
                f"session {sid}'s last timer {timers[-1]} woke it {fired[(sid, timers[-1])]} times"
            )
    return problems
