"""The terminal side of ``turnflow dev``'s chat: lines typed at the prompt (read by a thread,
with ``readline`` editing and history, pasted lines kept together as a burst), Ctrl-C, and the
note when a terminal cut a long line."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from consumer.chat_client import Chat

__all__ = ["PASTE_GAP_S", "TTY_LINE_MAX", "TerminalLines", "from_list", "noting_cuts",
           "until_interrupted"]


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
