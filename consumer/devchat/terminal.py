"""The terminal's view of the chat client (``turnflow dev``): ``Chat`` prints each turn's replies,
outcomes and ``llm_calls`` as the consumer runs them; lines typed at the prompt are read by a
thread (``readline`` editing and history, pasted lines kept together as a burst); Ctrl-C ends
it; a line the terminal cut is noted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, TextIO

from consumer.devchat.client import (
    DeadLetterNotice,
    ObservedTurn,
    ReplyReader,
    field_of,
    format_outcomes,
    markers,
    message_input,
    produce,
)
from consumer.devchat.lines import ChatLine, parse_chat_lines
from consumer.errors import first_line as _first_line
from engine import ProviderError, TurnRequestError
from engine.keys import session_tag

__all__ = [
    "PASTE_GAP_S",
    "TTY_LINE_MAX",
    "Chat",
    "TerminalLines",
    "from_list",
    "noting_cuts",
    "until_interrupted",
]


async def until_interrupted(chatting: Any) -> None:
    """Run the chat until it ends or Ctrl-C. SIGINT is taken here rather than as a
    KeyboardInterrupt, so that it ends the chat wherever it lands (waiting for a reply, at the
    prompt) and the servers still stop in order."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    chat_task = asyncio.ensure_future(chatting)
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    waiter = asyncio.ensure_future(interrupted.wait())
    try:
        await asyncio.wait({chat_task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        waiter.cancel()
        if not chat_task.done():
            chat_task.cancel()
            await asyncio.wait({chat_task}, timeout=5)
    if interrupted.is_set():
        print("\nturnflow dev: stopped.", file=sys.stderr, flush=True)
    elif (error := chat_task.exception()) is not None:
        raise error


async def from_list(lines: Iterable[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


TTY_LINE_MAX = 4095
"""The longest line a terminal in its plain (canonical) mode hands over; the kernel drops the
rest. With ``readline`` the terminal is not in that mode and no line is cut."""


async def noting_cuts(lines: AsyncIterator[str], chat: Chat) -> AsyncIterator[str]:
    """Pass the typed lines on, saying when the terminal cut one."""
    async for chunk in lines:
        for line in chunk.split("\n"):
            if not _READLINE and len(line) >= TTY_LINE_MAX:
                chat.say(f"  [the terminal cut this line at {TTY_LINE_MAX} characters; "
                         "only those were sent]")
        yield chunk


try:  # line editing and history for input(); absent on some builds, and then the plain line
    import readline as _readline_module

    _READLINE: Any = _readline_module
except ImportError:  # pragma: no cover - CPython on Linux and macOS ships it
    _READLINE = None


PASTE_GAP_S = 0.05
"""Lines that reach the terminal closer together than this were pasted, not typed."""


class TerminalLines:
    """Lines typed at the terminal, read by a daemon thread so that timers keep printing while
    the user types, and Ctrl-C never waits for a blocked ``input()``. ``readline`` gives the
    arrow keys, editing and a history kept in ``history`` between runs."""

    PROMPT = "you> "

    def __init__(self, history: Path | None = None) -> None:
        self.at_prompt = False
        self._history = history
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()

    @contextlib.contextmanager
    def editing(self) -> Any:
        """Load the history, and on the way out save it and give the terminal back as it was
        (Ctrl-C may land while ``readline`` has it in its own mode)."""
        saved = _terminal_state()
        if _READLINE is not None and self._history is not None:
            with contextlib.suppress(OSError):
                _READLINE.read_history_file(str(self._history))
            _READLINE.set_history_length(1000)
        try:
            yield self
        finally:
            if _READLINE is not None and self._history is not None:
                with contextlib.suppress(OSError):
                    _READLINE.write_history_file(str(self._history))
            _restore_terminal(saved)

    def __aiter__(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._read, args=(loop,), name="dev-stdin", daemon=True).start()
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        """Each typed line; lines that come in together (pasted) as one chunk, one per line,
        which the chat sends as a burst."""
        while (line := await self._queue.get()) is not None:
            chunk = [line]
            ended = False
            while True:
                try:
                    more = await asyncio.wait_for(self._queue.get(), PASTE_GAP_S)
                except TimeoutError:
                    break
                if more is None:
                    ended = True
                    break
                chunk.append(more)
            yield "\n".join(chunk)
            if ended:
                return

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            self.at_prompt = True
            try:
                line: str | None = input(self.PROMPT)
            except (EOFError, KeyboardInterrupt):
                line = None
            self.at_prompt = False
            loop.call_soon_threadsafe(self._queue.put_nowait, line)
            if line is None or line.strip() in ("/quit", "/exit"):
                return


def _terminal_state() -> Any:
    try:
        import termios

        return termios.tcgetattr(sys.stdin.fileno())
    except (ImportError, OSError, ValueError):
        return None


def _restore_terminal(state: Any) -> None:
    if state is None:
        return
    import termios

    with contextlib.suppress(OSError, ValueError):
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, state)


class Chat:
    """Sends the customer's lines, prints each turn's replies, outcomes and ``llm_calls``.

    Turns are printed in the order the consumer ran them, including the ones nobody typed for
    (a timer firing). A typed input is done when its turn has been printed.
    """

    def __init__(
        self,
        *,
        session_id: str,
        agent_name: str,
        producer: Any,
        inbound_topic: str,
        replies: ReplyReader,
        out: TextIO,
        reply_timeout: float,
        echo: bool,
    ) -> None:
        self.session_id = session_id
        self._agent_name = agent_name
        self._producer = producer
        self._inbound_topic = inbound_topic
        self._replies = replies
        self._out = out
        self._reply_timeout = reply_timeout
        self._echo = echo
        self._turns: asyncio.Queue[ObservedTurn] = asyncio.Queue()
        self._shown: dict[str, asyncio.Event] = {}
        self._sent = 0
        self._sent_at: dict[tuple[str, int, int], str] = {}  # where each input landed
        self._early_letters: dict[tuple[str, int, int], DeadLetterNotice] = {}
        self.missing = 0  # inputs or replies that never showed up
        self.prompt: TerminalLines | None = None
        self.log_path: Path = Path(".turnflow") / "dev.log"
        self.max_record_bytes: int | None = None  # MAX_RECORD_BYTES of the consumer

    def observe(self, turn: ObservedTurn) -> None:
        """Called by ``ObservedAgent`` inside the consumer; only this session's turns count."""
        if turn.request.get("session_id") == self.session_id:
            self._turns.put_nowait(turn)

    def failed(self, request: dict[str, Any], error: BaseException) -> None:
        """A turn raised (the consumer retries it or dead-letters it): say so now, and stop
        waiting for an input that retrying cannot help."""
        if request.get("session_id") != self.session_id:
            return
        self.say(f"  [the turn failed: {type(error).__name__}: {_first_line(error)}]")
        hopeless = isinstance(error, TurnRequestError) or (
            isinstance(error, ProviderError) and error.kind == "fatal"
        )
        if hopeless:
            for marker in markers(request):
                if marker in self._shown:
                    self.missing += 1
                    self._shown[marker].set()

    def dead_lettered(self, letter: DeadLetterNotice) -> None:
        """The consumer sent one of this chat's inputs to the DLQ: no turn will run for it, so
        say why now instead of waiting out the turn timeout."""
        input_id = self._sent_at.get(letter.source) if letter.source else None
        if input_id is None and letter.session_id == self.session_id:
            input_id = letter.input_id
        if input_id is None or input_id not in self._shown:
            if letter.source is not None and letter.session_id in (None, self.session_id):
                # It may be ours, read before its send returned; a few are enough to keep.
                self._early_letters[letter.source] = letter
                while len(self._early_letters) > 64:
                    self._early_letters.pop(next(iter(self._early_letters)))
            return
        self._report_dead_letter(input_id, letter)

    def _report_dead_letter(self, input_id: str, letter: DeadLetterNotice) -> None:
        event = self._shown.get(input_id)
        if event is None or event.is_set():
            return
        detail = f": {letter.detail}" if letter.detail else ""
        self.say(f"  [input {input_id} was sent to the dead-letter topic ({letter.reason}"
                 f"{detail}); no turn will run for it; see {self.log_path}]")
        self.missing += 1
        event.set()

    def say(self, line: str) -> None:
        if self.prompt is not None and self.prompt.at_prompt:
            # A timer fired while the user sits at the prompt: print above it, then redraw it.
            self._out.write(f"\r\033[K{line}\n{self.prompt.PROMPT}")
        else:
            self._out.write(line + "\n")
        self._out.flush()

    async def display(self) -> None:
        """Print every observed turn, in order, forever (cancelled on exit)."""
        while True:
            turn = await self._turns.get()
            try:
                await self._show(turn)
            finally:
                self._turns.task_done()

    async def _show(self, turn: ObservedTurn) -> None:
        request, result = turn.request, turn.result
        if request.get("wake"):
            # The chat has one conversation: its tag in the key is noise on screen.
            shown = str(request["wake"]).replace(f"@{session_tag(self.session_id)}", "", 1)
            self.say(f"  [timer fired: {shown}]")
        for message in field_of(result, "messages", []) or []:
            key = str(field_of(message, "key"))
            record = await self._replies.wait_for(key, self._reply_timeout)
            if record is None:
                self.missing += 1
                self.say(f"  [reply {key} was not published within {self._reply_timeout:.0f}s]")
                continue
            after_ms = int(record.get("after_ms") or 0)
            if after_ms:
                await asyncio.sleep(after_ms / 1000)  # what a delivery worker would wait
            pause = f" (after {after_ms} ms)" if after_ms else ""
            self.say(f"{self._agent_name}> {record.get('text')}{pause}")
        self.say(f"  [{format_outcomes(result)}]")
        for marker in markers(request):
            if marker in self._shown:
                self._shown[marker].set()

    async def send(self, line: ChatLine) -> None:
        """Produce one input (or a burst's messages together) and wait until its turn has been
        printed, or the consumer dead-lettered it, or the wait timed out."""
        values: list[tuple[str, dict[str, Any]]] = []
        if line.kind in ("message", "burst"):
            texts = line.messages if line.kind == "burst" else (line.text,)
            if len(texts) > 1:
                self.say(f"  [burst of {len(texts)} messages sent together]")
            for text in texts:
                self._sent += 1
                input_id = f"{self.session_id}-m{self._sent}"
                if self._echo or len(texts) > 1:
                    self.say(f"you> {text}")
                values.append((input_id, message_input(self.session_id, input_id, text)))
        else:
            self._sent += 1
            input_id = f"{self.session_id}-e{self._sent}"
            self.say(f"  [event {line.event} sent]")
            values.append((input_id, {"session_id": self.session_id, "event": line.event,
                                      "payload": line.payload, "key": input_id}))
        encoded = [(input_id, json.dumps(value).encode()) for input_id, value in values]
        for _, record in encoded:
            if self.max_record_bytes is not None and len(record) > self.max_record_bytes:
                self.say(f"  [not sent: this input is {len(record)} bytes and the consumer "
                         f"refuses records over MAX_RECORD_BYTES ({self.max_record_bytes})]")
                return
        shown = {input_id: asyncio.Event() for input_id, _ in encoded}
        self._shown.update(shown)
        try:
            sent = await self._produce([record for _, record in encoded])
            for (input_id, _), where in zip(encoded, sent, strict=True):
                if where is None:
                    continue
                self._sent_at[where] = input_id
                if (letter := self._early_letters.pop(where, None)) is not None:
                    self._report_dead_letter(input_id, letter)
            await asyncio.wait_for(
                asyncio.gather(*(event.wait() for event in shown.values())), self._reply_timeout
            )
        except TimeoutError:
            self.missing += 1
            self.say(f"  [no turn ran for this input within {self._reply_timeout:.0f}s; "
                     f"see {self.log_path}]")
        finally:
            for input_id in shown:
                self._shown.pop(input_id, None)

    async def _produce(self, records: list[bytes]) -> list[tuple[str, int, int] | None]:
        return await produce(self._producer, self._inbound_topic, self.session_id, records)

    async def settle(self) -> None:
        """Wait until every turn already observed has been printed."""
        await self._turns.join()

    async def run(self, lines: AsyncIterator[str]) -> None:
        async for chunk in lines:
            for line in parse_chat_lines(chunk):
                if isinstance(line, ValueError):
                    self.say(f"  [{line}]")
                    continue
                if line.kind == "quit":
                    await self.settle()
                    return
                if line.kind == "wait":
                    self.say(f"  [waiting {line.seconds:g}s]")
                    await asyncio.sleep(line.seconds)
                    continue
                await self.send(line)
        await self.settle()
