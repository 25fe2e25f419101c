"""``turnflow dev`` (what ``make run`` runs) exports traces when the standard ``OTEL_*``
variables are set, as ``consume``, ``schedule`` and ``relay`` do: the chat's consumer, scheduler
and relay run in its process, so each turn and the silence follow-up's wake reach the OTLP/HTTP
endpoint, every span of a turn under the chat's session id. Without the variables nothing is sent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, database_url: str, kafka_bootstrap: str
) -> tuple[DevRun, OtlpReceiver]:
    with otlp_receiver() as receiver:
        env = {**server_env(database_url, kafka_bootstrap, "dev-traces"),
               "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
               "OTEL_SERVICE_NAME": "turnflow-dev",
               "OTEL_BSP_SCHEDULE_DELAY": "200"}
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
