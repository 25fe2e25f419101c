"""The long-running commands' event loop: uvloop by default where installed, asyncio on request."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal

import pytest

from consumer import event_loop
from consumer.commands.running import EXIT_CONFIG, run_service
from consumer.event_loop import EventLoopChoice, running_loop_name


def _loop_of(choice: EventLoopChoice) -> str:
    seen: list[str] = []

    async def run() -> int:
        seen.append(running_loop_name())
        return 0

    assert run_service(run, lambda: None, event_loop=choice) == 0
    return seen[0]


def test_uvloop_is_installed_with_the_service() -> None:
    """A dependency on Linux: ``auto`` means uvloop on every machine the service runs on."""
    assert importlib.util.find_spec("uvloop") is not None


@pytest.mark.parametrize(("choice", "expected"),
                         [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_each_choice_runs_on_its_loop(choice: EventLoopChoice, expected: str) -> None:
    assert _loop_of(choice) == expected


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(event_loop.importlib.util, "find_spec",
                        lambda name, *a: None if name == "uvloop" else real(name, *a))
    assert _loop_of("auto") == "asyncio"


def test_insisting_on_missing_uvloop_fails_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(event_loop.importlib.util, "find_spec",
                        lambda name, *a: None if name == "uvloop" else real(name, *a))
    ran: list[bool] = []

    async def run() -> None:
        ran.append(True)

    assert run_service(run, lambda: None, event_loop="uvloop") == EXIT_CONFIG
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "EVENT_LOOP=uvloop" in err[0] and "not installed" in err[0]
    assert ran == []


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_sigterm_stops_the_service_cleanly_on_either_loop(choice: EventLoopChoice) -> None:
    """SIGTERM reaches ``stop`` through the loop's signal handler; the exit code is 0."""
    stopping: list[asyncio.Event] = []

    async def run() -> None:
        stopped = asyncio.Event()
        stopping.append(stopped)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stopped.wait(), timeout=5)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert run_service(run, lambda: stopping[0].set(), event_loop=choice) == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopping[0].is_set()
