"""Shared test configuration: the server fixtures live in tests/fixtures/."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from consumer import heap
from engine.session import Run
from engine.state import TurnState

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.broker"]

# No per-example time limit for property tests: Hypothesis's default (200 ms) is a timing
# assertion, and on a shared two-core host an example of the log formatter once took longer
# while a benchmark ran beside the tests. Speed is measured in bench/, not asserted here.
settings.register_profile("turnflow", deadline=None)
settings.load_profile("turnflow")


@pytest.fixture(autouse=True)
def _heap_left_as_found() -> Iterator[None]:
    """A command run in-process (``cli.main(["consume", ...])``) settles the heap as a service
    process does (``consumer.heap``): frozen, a larger young threshold, timed collections.
    Undone after the test, so the rest of the session runs with the interpreter's defaults."""
    yield
    if gc.get_freeze_count() or heap.is_settled():
        heap.unsettle()


@pytest.fixture(autouse=True)
def _status_index_checked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every turn of every test checks ``TurnState``'s index of asking and suspended runs
    against the scan it replaces, on every query (see tests/engine/test_status_index.py)."""
    if request.node.get_closest_marker("unchecked_status_index"):
        return
    having = TurnState._having

    def checked_having(self: TurnState, status: str) -> list[Run]:
        found = having(self, status)  # type: ignore[arg-type]
        expected = [r for r in self.session.runs if r.status == status]
        assert len(found) == len(expected) and all(
            a is b for a, b in zip(found, expected, strict=True)
        ), f"the index of {status!r} runs is out of step with the runs"
        return found

    monkeypatch.setattr(TurnState, "_having", checked_having)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory, for the tracing tests; off again after the test. The SDK is
    imported here, not at the top, so the tests that check tracing off imports none of it see a
    clean process."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from consumer import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider=provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()
