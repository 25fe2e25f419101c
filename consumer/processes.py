"""The child processes turnflow starts: started, waited for until they serve, stopped, killed.

The embedded broker of ``turnflow dev``, and in the tests Apache Kafka, llama.cpp's server and the
stand-in model, are each a server in a child process. They differ in how they start and how
they tell that they serve; what they share is here, once: a start that fails fast and clearly
when the child exits or does not get ready in time (and then leaves nothing running), a stop that
asks (SIGTERM) and then insists (SIGKILL after a grace), and a kill that gives the child no
chance to flush anything, as in a crash.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ChildProcess", "free_port", "kill", "terminate"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def terminate(process: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> None:
    """SIGTERM a child process and reap it, SIGKILL after ``timeout``; a no-op when it is
    gone already. The one way servers we started are stopped, so none is left running."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


def kill(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGKILL a child process and reap it; a no-op when it is gone already."""
    if process is None or process.poll() is not None:
        return
    process.kill()
    process.wait(timeout=timeout)


class ChildProcess:
    """One supervised child: ``start`` it and wait until ``ready()``, ``stop`` or ``kill`` it.

    ``start`` raises what ``exited(returncode)`` builds when the child ends before it is ready,
    and what ``timed_out()`` builds when it is not ready within ``within`` seconds (after
    stopping it), so each caller keeps its own error type and message.
    """

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(
        self,
        command: Sequence[str],
        *,
        ready: Callable[[], bool],
        within: float,
        exited: Callable[[int], BaseException],
        timed_out: Callable[[], BaseException],
        poll_s: float = 0.1,
        stop_timeout: float = 5.0,
        **popen: Any,
    ) -> None:
        """Run ``command`` (``popen`` goes to ``subprocess.Popen``) and return once ``ready()``;
        ``OSError`` from ``Popen`` is the caller's to turn into its error."""
        self.process = subprocess.Popen(list(command), **popen)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            returncode = self.process.poll()
            if returncode is not None:
                self.process = None
                raise exited(returncode)
            if ready():
                return
            time.sleep(poll_s)
        self.stop(stop_timeout)
        raise timed_out()

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; a no-op when it is not running."""
        process, self.process = self.process, None
        terminate(process, timeout)

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL: the child gets no chance to flush or close anything, as in a crash."""
        process, self.process = self.process, None
        kill(process, timeout)
