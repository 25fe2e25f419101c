"""``turnflow dev`` in a terminal: typed lines, replies above the prompt, a timer on its own."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.consumer.dev_process import REPO, clean_env, server_env

pytestmark = pytest.mark.integration


class Terminal:
    """A child process on a pseudo-terminal, read until some text shows up."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the command
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        self.screen = ""

    def expect(self, text: str, within: float = 90) -> None:
        deadline = time.monotonic() + within
        while text not in self.screen:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{text!r} did not appear; screen:\n{self.screen}")
            ready, _, _ = select.select([self.fd], [], [], min(remaining, 0.5))
            if ready:
                try:
                    self.screen += os.read(self.fd, 65536).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    raise AssertionError(f"{text!r} never appeared:\n{self.screen}") from None

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def wait(self, within: float = 60) -> int:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            with_output = select.select([self.fd], [], [], 0.2)[0]
            if with_output:
                try:
                    self.screen += os.read(self.fd, 65536).decode(errors="replace")
                except OSError:
                    pass
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"turnflow dev did not exit; screen:\n{self.screen}")


def test_typing_in_a_terminal(tmp_path: Path, database_url: str, kafka_bootstrap: str) -> None:
    """Replies print above the prompt, a silence follow-up arrives untyped, /quit exits 0."""
    env = {**clean_env(), "METRICS_PORT": "0", "TERM": "dumb",
           **server_env(database_url, kafka_bootstrap, "terminal"),
           "TURNFLOW_DEMO_SILENCE_MS": "2000"}
    terminal = Terminal(
        [sys.executable, "-m", "consumer.cli", "dev", "--data-dir", str(tmp_path)], env, REPO
    )
    terminal.expect("Type a message.")
    terminal.type("I want to book a repair")
    terminal.expect("ana> Which service does the bike need")
    terminal.expect("llm_calls=2")
    terminal.expect("ana> Still there? Just reply whenever you're ready.", within=30)
    terminal.type("/quit")
    assert terminal.wait() == 0
    assert "[timer fired: silence:nudge:" in terminal.screen


def test_arrow_keys_recall_history_and_ctrl_c_exits_zero(
    tmp_path: Path, database_url: str, kafka_bootstrap: str
) -> None:
    """Up-arrow brings back the last line (no ``^[[A`` on screen), the history is saved in the
    data folder, and Ctrl-C ends the chat with exit code 0."""
    env = {**clean_env(), "METRICS_PORT": "0", "TERM": "xterm",
           **server_env(database_url, kafka_bootstrap, "history")}
    terminal = Terminal(
        [sys.executable, "-m", "consumer.cli", "dev", "--data-dir", str(tmp_path)], env, REPO
    )
    terminal.expect("Type a message.")
    terminal.type("what are your opening hours?")
    terminal.expect("ana> We're open Monday to Saturday")
    terminal.expect("you> ")
    before = terminal.screen.count("ana> We're open Monday to Saturday")
    terminal.type("\x1b[A")  # the up arrow, then Enter
    deadline = time.monotonic() + 60
    while terminal.screen.count("ana> We're open Monday to Saturday") <= before:
        assert time.monotonic() < deadline, terminal.screen
        if select.select([terminal.fd], [], [], 0.5)[0]:
            terminal.screen += os.read(terminal.fd, 65536).decode(errors="replace")
    assert "^[[A" not in terminal.screen
    os.write(terminal.fd, b"\x03")  # Ctrl-C
    assert terminal.wait() == 0
    assert "what are your opening hours?" in (tmp_path / "chat_history").read_text()
