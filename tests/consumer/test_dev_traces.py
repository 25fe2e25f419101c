"""``turnflow dev`` (what ``make run`` runs) exports traces when the standard ``OTEL_*``
variables are set, as ``consume``, ``schedule`` and ``relay`` do: the chat's consumer, scheduler
and relay run in its process, so each turn and the silence follow-up's wake reach the OTLP/HTTP
endpoint, every span of a turn under the chat's session id. The chat's replies and timers go
out as the service's do: each record carries its turn span's context (the turn span is its
parent in the trace), with no span of its own. Without the variables nothing is sent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from tests.consumer.dev_process import DevRun, run_dev, server_env
from tests.fixtures.otlp_receiver import OtlpReceiver, otlp_receiver

pytestmark = pytest.mark.integration

SCRIPT = """\
hi
I need the brakes fixed on saturday
/wait 6
"""


def _chat(folder: Path, env: dict[str, str], session: str) -> DevRun:
    script = folder / "demo.chat"
    script.write_text(SCRIPT)
    return run_dev("--script", str(script), "--data-dir", str(folder), "--session", session,
                   env=env)


TRACED_ENV: dict[str, str] = {}  # the traced chat's servers and topics


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, database_url: str, kafka_bootstrap: str
) -> tuple[DevRun, OtlpReceiver]:
    with otlp_receiver() as receiver:
        env = {**server_env(database_url, kafka_bootstrap, "dev-traces"),
               "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
               "OTEL_SERVICE_NAME": "turnflow-dev",
               "OTEL_BSP_SCHEDULE_DELAY": "200"}
        TRACED_ENV.update(env)
        run = _chat(tmp_path_factory.mktemp("dev-traces"), env, "traced-chat")
    return run, receiver


def test_the_chat_runs_and_says_where_traces_go(traced: tuple[DevRun, OtlpReceiver]) -> None:
    run, receiver = traced
    assert run.code == 0, run.stderr
    assert f"traces    OTLP/HTTP {receiver.endpoint}" in run.stdout


def _conversation(span: object) -> str | None:
    for attribute in span.attributes:  # type: ignore[attr-defined]
        if attribute.key == "gen_ai.conversation.id":
            return str(attribute.value.string_value)
    return None


def test_every_turn_and_the_wake_are_exported(traced: tuple[DevRun, OtlpReceiver]) -> None:
    """Two messages and a silence follow-up: three turn spans of the chat's conversation and the
    scheduler's wake (a PRODUCER span), all under the service name given. (The test database is
    shared by the session's tests, so the chat's scheduler may also wake another test's leftover
    timer; only this chat's conversation is counted.)"""
    _, receiver = traced
    assert {path for path, _ in receiver.bodies} == {"/v1/traces"}
    spans = [span for _, span in receiver.spans()]
    assert {resource["service.name"] for resource, _ in receiver.spans()} == {"turnflow-dev"}
    ours = [s for s in spans if _conversation(s) == "traced-chat"]
    turns = [s for s in ours if s.name.startswith("process ")]  # process <inbound topic>
    assert len(turns) >= 3, [s.name for s in ours]
    assert all(s.kind == s.SPAN_KIND_CONSUMER for s in turns)
    wakes = [s for s in ours if s.kind == s.SPAN_KIND_PRODUCER and s.name.startswith("send")]
    assert wakes, [s.name for s in ours]
    # The wake's turn is the wake span's child: the follow-up is traced from the scheduler on.
    assert any(t.parent_span_id == w.span_id for t in turns for w in wakes)


async def _records(bootstrap: str, topic: str, key: bytes) -> list[list[tuple[str, bytes]]]:
    """The headers of every record of ``topic`` keyed ``key``, read from the start."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        found: list[list[tuple[str, bytes]]] = []
        for _ in range(10):
            batches = await consumer.getmany(timeout_ms=500)
            found += [list(r.headers) for records in batches.values() for r in records
                      if r.key == key]
            if found and not batches:
                break
        return found
    finally:
        await consumer.stop()


def test_replies_and_timers_go_out_in_their_turns_trace_as_the_services_do(
    traced: tuple[DevRun, OtlpReceiver],
) -> None:
    """Every reply on ``outbound.messages`` and every timer on ``outbound.schedule`` of the chat
    carries the ``traceparent`` of one of the chat's turn spans (its parent in the trace, as the
    delivery worker reads it). As in ``turnflow consume``, a turn's own sends make no span: the
    chat's only PRODUCER spans are the scheduler's wakes, ``send <inbound topic>``."""
    run, receiver = traced
    assert run.code == 0, run.stderr
    ours = [s for _, s in receiver.spans() if _conversation(s) == "traced-chat"]
    turns = {(s.trace_id.hex(), s.span_id.hex()) for s in ours if s.name.startswith("process ")}
    producers = {s.name for s in ours if s.kind == s.SPAN_KIND_PRODUCER}
    assert producers == {f"send {TRACED_ENV['INBOUND_TOPIC']}"}, producers
    bootstrap = TRACED_ENV["KAFKA_BOOTSTRAP_SERVERS"]
    for topic in (TRACED_ENV["MESSAGES_TOPIC"], TRACED_ENV["SCHEDULE_TOPIC"]):
        sent = asyncio.run(_records(bootstrap, topic, b"traced-chat"))
        assert sent, topic
        for headers in sent:
            parent = dict(headers)["traceparent"].decode().split("-")
            assert (parent[1], parent[2]) in turns, (topic, parent)


def test_nothing_is_sent_without_the_variables(
    tmp_path: Path, database_url: str, kafka_bootstrap: str
) -> None:
    with otlp_receiver() as receiver:
        env = server_env(database_url, kafka_bootstrap, "dev-untraced")
        run = _chat(tmp_path, env, "untraced-chat")
        assert run.code == 0, run.stderr
    assert receiver.bodies == []
    assert "traces " not in run.stdout


def test_an_unusable_exporter_is_one_line(tmp_path: Path) -> None:
    """Refused before any server starts, in one line, as ``consume`` refuses it."""
    (tmp_path / "one.chat").write_text("hi\n")
    run = run_dev("--script", str(tmp_path / "one.chat"), "--data-dir", str(tmp_path),
                  env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                       "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert run.code == 1
    assert run.error_lines == [run.error_lines[0]] and "OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in (
        run.error_lines[0])
