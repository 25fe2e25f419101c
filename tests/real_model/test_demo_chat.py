"""The demo's scripted chat through ``turnflow dev`` (consumer, scheduler, topics, store) with
the real model behind it: every input gets its turn printed and the command exits 0, and no
reply that failed to parse is ever printed as the agent's words."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.consumer.dev_process import DevRun, run_dev, server_env
from tests.fixtures.llama_server import MODEL_NAME, LlamaServer

pytestmark = [pytest.mark.real_model_slow, pytest.mark.integration, pytest.mark.timeout(1500)]

DEMO_CHAT = Path(__file__).resolve().parents[2] / "examples" / "demo.chat"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, database_url: str, kafka_bootstrap: str,
             llama_server: LlamaServer) -> tuple[DevRun, float]:
    """examples/demo.chat once through ``turnflow dev`` against the real model, timed."""
    folder = tmp_path_factory.mktemp("dev-real-model")
    env = {**server_env(database_url, kafka_bootstrap, "real-model"),
           "OPENAI_BASE_URL": llama_server.base_url, "TURNFLOW_MODEL": MODEL_NAME,
           "TURNFLOW_MODEL_MAX_TOKENS": "128", "TURNFLOW_MODEL_TIMEOUT": "120"}
    started = time.monotonic()
    run = run_dev("--script", str(DEMO_CHAT), "--data-dir", str(folder), env=env, timeout=1200)
    return run, time.monotonic() - started


def _inputs() -> int:
    lines = [line.strip() for line in DEMO_CHAT.read_text().splitlines()]
    return sum(1 for line in lines if line and not line.startswith(("#", "/wait", "/quit")))


def test_the_demo_chat_completes_with_the_real_model(demo_run: tuple[DevRun, float]) -> None:
    """Every scripted input got its turn and replies through the consumer: exit 0, no error,
    and the banner names the real model, not the offline provider."""
    run, seconds = demo_run
    print(f"turnflow dev --script examples/demo.chat with {MODEL_NAME}: {seconds:.1f}s")
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.error_lines == []
    assert re.search(rf"model +OpenAI-compatible model {MODEL_NAME} at http://127\.0\.0\.1",
                     run.stdout), run.stdout[:800]
    footers = [line for line in run.stdout.splitlines() if re.match(r"\s+\[llm_calls", line)]
    assert len(footers) >= _inputs(), run.stdout


def test_no_broken_reply_is_printed_as_the_agents_words(demo_run: tuple[DevRun, float]) -> None:
    """Not one line the agent says opens like a JSON envelope or a code fence."""
    run, _ = demo_run
    said = [line.removeprefix("ana> ") for line in run.stdout.splitlines()
            if line.startswith("ana> ")]
    assert said, run.stdout
    assert not [text for text in said if text.lstrip().startswith(("{", "[", "```"))]
