"""The inspector's test console: chat with the agent through the real topics, from the page.

It is the second view of ``consumer.devchat.client`` (``turnflow dev``'s terminal is the first): a
message goes out as a channel adapter would write it (``message_input`` and ``produce`` into
``inbound.turns``, under a session id of the console's own, ``console-`` and random hex), the
consumer answers it, the replies are read back from ``outbound.messages`` (``ReplyReader``),
and the turn itself is observed where the consumer runs it (``ObservedAgent`` calls
``observe``); the DLQ topic is read from its end (``DeadLetterReader``), so a message the
consumer dead-letters is reported at once. The console writes nothing else: no database row,
no other topic.

Why the turn is observed and not only read back: the decision trace is in the turn log, and the
page reads it there like every other page (``consumer.inspect.reading``), but the link check's
changes to a reply (``TurnResult.link_fixes``: each link kept, repaired or removed) are neither
saved nor published. Only the running turn has them, so the console keeps them, per input, for
the page to show under the reply. ``turnflow ui --console`` therefore runs the consumer and the
scheduler in its own process (``consumer.devchat.servers.DevServices``), on topics named for the
console's run, so it answers only the console's inputs and never takes a real consumer's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from consumer.devchat.client import (
    DeadLetterNotice,
    DeadLetterReader,
    ObservedAgent,
    ObservedTurn,
    ReplyReader,
    field_of,
    format_outcomes,
    markers,
    message_input,
    new_chat_run,
    produce,
    reader_consumer,
    start_producer,
)
from consumer.devchat.lines import parse_chat_line
from consumer.devchat.servers import (
    DevServices,
    create_topics,
    dev_metrics,
    new_run_id,
    run_topics,
)
from consumer.errors import DevError
from consumer.inputs import MAX_SESSION_ID_CHARS
from consumer.settings import Settings
from engine import Agent
from engine.recording import recorded_agent

__all__ = [
    "CONSOLE_PREFIX",
    "Console",
    "ConsoleReplies",
    "Exchange",
    "is_console_session",
    "new_console_session",
    "open_console",
]

CONSOLE_PREFIX = "console-"
MAX_TEXT_CHARS = 4000
"""The longest message the console sends (the form says so too)."""
_LINK = re.compile(r"https?://[^\s<>\"'`()\[\]{}]+", re.IGNORECASE)
"""A link in a delivered reply: the ones the check neither repaired nor removed were kept."""
KEPT_EXCHANGES = 200
"""Exchanges kept in memory across all console sessions; older ones are dropped first."""


def new_console_session() -> str:
    """A session id no channel uses: the console's prefix and 12 random hex digits."""
    return CONSOLE_PREFIX + secrets.token_hex(6)


def is_console_session(value: str) -> bool:
    """Whether ``value`` is a console session id: the console never writes under any other."""
    rest = value[len(CONSOLE_PREFIX):]
    return (value.startswith(CONSOLE_PREFIX) and 0 < len(rest) <= 32
            and len(value) <= MAX_SESSION_ID_CHARS
            and all(c in "0123456789abcdef" for c in rest))


@dataclass
class Exchange:
    """One message the console sent and what came of it."""

    session_id: str
    input_id: str
    text: str
    replies: list[str] = field(default_factory=list)
    link_fixes: list[dict[str, Any]] = field(default_factory=list)  # repaired or removed
    kept_links: list[str] = field(default_factory=list)  # in the replies as the model wrote them
    outcomes: str = ""
    problem: str | None = None  # why nothing (or not everything) came back
    answered: bool = False


class ConsoleReplies(ReplyReader):
    """``ReplyReader`` over every console session at once (one reader for the whole page)."""

    def __init__(self, consumer: Any, topic: str) -> None:
        super().__init__(consumer, topic, session_id="")

    def wants(self, session_id: Any) -> bool:
        return isinstance(session_id, str) and is_console_session(session_id)


class Console:
    """Sends the page's messages and gathers each one's turn: replies, outcomes, link fixes."""

    def __init__(self, *, producer: Any, inbound_topic: str, replies: ReplyReader,
                 reply_timeout: float) -> None:
        self._producer = producer
        self._inbound_topic = inbound_topic
        self._replies = replies
        self._reply_timeout = reply_timeout
        self._turns: dict[str, asyncio.Future[ObservedTurn | DeadLetterNotice]] = {}
        self._sent = 0
        # in every input id: a console opened again on a session of an earlier run (its page
        # reloaded after a restart) sends new ids, not ones the turn log already has
        self._run = new_chat_run()
        self.exchanges: OrderedDict[str, Exchange] = OrderedDict()

    def observe(self, turn: ObservedTurn) -> None:
        """Called by ``ObservedAgent`` inside the consumer: a console session's turn is handed
        to the input it answers; any other session's is none of the console's business."""
        session_id = turn.request.get("session_id")
        if not isinstance(session_id, str) or not is_console_session(session_id):
            return
        for marker in markers(turn.request):
            waiting = self._turns.get(marker)
            if waiting is not None and not waiting.done():
                waiting.set_result(turn)

    def dead_lettered(self, letter: DeadLetterNotice) -> None:
        """Called by ``DeadLetterReader``: a console input the consumer sent to the DLQ will
        get no turn, so its wait ends now, with the reason, instead of at the timeout."""
        waiting = self._turns.get(letter.input_id or "")
        if (waiting is not None and not waiting.done()
                and letter.session_id is not None and is_console_session(letter.session_id)):
            waiting.set_result(letter)

    def of(self, session_id: str) -> list[Exchange]:
        return [e for e in self.exchanges.values() if e.session_id == session_id]

    async def send(self, session_id: str, text: str) -> Exchange:
        """Write one message to ``inbound.turns`` and wait for its turn and its replies."""
        if not is_console_session(session_id):
            raise ValueError("the console writes under its own session ids only")
        try:  # the terminal's commands (/event, /wait, /burst ...) are not the console's
            line = parse_chat_line(text)
        except ValueError:
            line = None
        if line is None or line.kind != "message" or not line.text:
            raise ValueError("the console sends plain messages: type a line of text")
        if len(line.text) > MAX_TEXT_CHARS:
            raise ValueError(f"a message is at most {MAX_TEXT_CHARS} characters")
        self._sent += 1
        input_id = f"{session_id}-{self._run}-m{self._sent}"
        exchange = Exchange(session_id, input_id, line.text)
        self.exchanges[input_id] = exchange
        while len(self.exchanges) > KEPT_EXCHANGES:
            self.exchanges.popitem(last=False)
        waiting: asyncio.Future[ObservedTurn | DeadLetterNotice] = (
            asyncio.get_running_loop().create_future())
        self._turns[input_id] = waiting
        try:
            record = json.dumps(message_input(session_id, input_id, line.text)).encode()
            await produce(self._producer, self._inbound_topic, session_id, [record])
            try:
                turn = await asyncio.wait_for(waiting, self._reply_timeout)
            except TimeoutError:
                exchange.problem = (f"no turn ran for this message within "
                                    f"{self._reply_timeout:.0f}s")
                return exchange
        finally:
            self._turns.pop(input_id, None)
        if isinstance(turn, DeadLetterNotice):
            detail = f": {turn.detail}" if turn.detail else ""
            exchange.problem = (f"the consumer sent this message to the dead-letter topic "
                                f"({turn.reason}{detail}); no turn ran for it")
            return exchange
        await self._gather(exchange, turn)
        return exchange

    async def _gather(self, exchange: Exchange, turn: ObservedTurn) -> None:
        result = turn.result
        exchange.answered = True
        exchange.outcomes = format_outcomes(result)  # the terminal chat's footer
        exchange.link_fixes = [
            {"action": str(field_of(fix, "action")), "url": str(field_of(fix, "url")),
             "replacement": field_of(fix, "replacement")}
            for fix in field_of(result, "link_fixes", []) or []
        ]
        for message in field_of(result, "messages", []) or []:
            key = str(field_of(message, "key"))
            record = await self._replies.wait_for(key, self._reply_timeout)
            if record is None:
                exchange.problem = f"reply {key} was not published within " \
                                   f"{self._reply_timeout:.0f}s"
                continue
            exchange.replies.append(str(record.get("text") or ""))
        changed = {f["replacement"] for f in exchange.link_fixes if f["replacement"]}
        exchange.kept_links = sorted({
            url.rstrip(".,;:!?") for reply in exchange.replies for url in _LINK.findall(reply)
        } - changed)



async def open_console(settings: Settings, agent: Any, stack: contextlib.AsyncExitStack,
                       *, reply_timeout: float) -> Console:
    """Everything the console needs, stopped by ``stack``: its topics (the configured names with
    a run id after them), the producer, the reply reader, and the consumer and scheduler running
    ``agent`` observed by the console. ``settings`` must name the broker and a database the
    consumer may write to (``KAFKA_BOOTSTRAP_SERVERS``, ``DATABASE_URL``)."""
    if not settings.kafka_bootstrap_servers or not settings.database_url:
        raise DevError("the test console needs KAFKA_BOOTSTRAP_SERVERS and DATABASE_URL")
    # Its own topics and group, and the dev chat's metrics rule (a free port on 127.0.0.1
    # unless METRICS_PORT/METRICS_HOST say otherwise): it starts beside a local
    # `turnflow consume` holding 9100 and publishes nothing to the network.
    settings = dev_metrics(settings.model_copy(update={
        **run_topics(settings, "console-" + new_run_id()),
        "group_id": f"{settings.group_id}-console",
    }))
    await create_topics(settings)
    client = settings.kafka_client_options()
    producer = await start_producer(settings, client, stack)
    replies = ConsoleReplies(
        reader_consumer(settings, client),
        settings.messages_topic,
    )
    await replies.start()
    stack.push_async_callback(replies.stop)
    console = Console(producer=producer, inbound_topic=settings.inbound_topic, replies=replies,
                      reply_timeout=reply_timeout)
    letters = DeadLetterReader(
        reader_consumer(settings, client),
        settings.dlq_topic,
        console.dead_lettered,
    )
    await letters.start()
    stack.push_async_callback(letters.stop)
    if isinstance(agent, Agent):  # the turn log keeps what `turnflow replay` needs
        agent = recorded_agent(agent)
    services = DevServices(settings, ObservedAgent(agent, console.observe))
    # Stopped by the stack even when it fails to start: its consumer's producer and its
    # database pool are closed, not left for the garbage collector to complain about.
    stack.push_async_callback(services.stop)
    await services.start()
    return console
