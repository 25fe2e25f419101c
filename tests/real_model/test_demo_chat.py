"""The demo's scripted chat through ``turnflow dev`` (consumer, scheduler, topics, store) with
the real model behind it, judged by what the customer gets: every message answered (by the
model or, when it had nothing usable to say, by the fallback message), none dead-lettered or
left without a turn, no reply that failed to parse shown as the agent's words, and the repair
booked where the model is able to book it.

The chat runs twice: through the OpenAI-compatible provider at the server's ``/v1``, and
through the Anthropic provider at the same server's ``/v1/messages``.

The default model, SmolLM2-135M, cannot book: it gives the same judgement whatever the
customer says, so the booking flow never gets the customer's answers. With it the test holds
the customer-facing guarantees only and says so. With
``TURNFLOW_LOCAL_MODEL=qwen2.5-coder-1.5b make test-real-model`` the booking itself is asserted.
Through the Anthropic provider no packaged model can book (none honours the forced envelope
tool: see test_anthropic_protocol.py), so there a message is answered by a step that needs no
model or by the fallback message, never lost: that is what that run checks.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from consumer.settings import Settings
from tests.consumer.dev_process import DevRun, run_dev, server_env
from tests.fixtures.llama_server import DEFAULT_MODEL, MODEL, MODEL_NAME, LlamaServer

pytestmark = [pytest.mark.real_model_slow, pytest.mark.integration, pytest.mark.timeout(3000)]

DEMO_CHAT = Path(__file__).resolve().parents[2] / "examples" / "demo.chat"
BOOKING_REF = re.compile(r"\bR-[0-9A-F]{6}\b")
"""The reference ``book_repair`` gives a booking."""
LOST = ("dead-letter topic", "no turn ran for this input", "was not published within",
        "Traceback")


@dataclass
class Answered:
    """One customer message of the transcript and what the agent said to it."""

    text: str
    replies: list[str] = field(default_factory=list)


def answers(stdout: str) -> list[Answered]:
    """Each ``you>`` line with the ``ana>`` lines of its own turn. A timer's turn (``[timer
    fired``, up to its ``[llm_calls`` footer) may print while a message waits; its words are
    not that message's answer."""
    inputs: list[Answered] = []
    in_timer = False
    for line in stdout.splitlines():
        if line.startswith("you> "):
            inputs.append(Answered(line.removeprefix("you> ")))
            in_timer = False
        elif line.startswith("  [timer fired"):
            in_timer = True
        elif line.startswith("  [llm_calls") and in_timer:
            in_timer = False
        elif line.startswith("ana> ") and inputs and not in_timer:
            inputs[-1].replies.append(line.removeprefix("ana> "))
    return inputs


def _messages() -> list[str]:
    lines = [line.strip() for line in DEMO_CHAT.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "/"))]


@dataclass(frozen=True)
class DemoRun:
    """One run of the scripted chat: which provider spoke to the server, what it printed."""

    provider: str
    run: DevRun
    seconds: float

    @property
    def banner(self) -> str:
        kind = "OpenAI-compatible" if self.provider == "openai" else "Anthropic"
        return rf"model +{kind} model {re.escape(MODEL_NAME)} at http://127\.0\.0\.1"


@pytest.fixture(scope="module", params=["openai", "anthropic"])
def demo_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             database_url: str, kafka_bootstrap: str, llama_server: LlamaServer) -> DemoRun:
    """examples/demo.chat once through ``turnflow dev`` against the real model, timed, through
    each provider: the OpenAI-compatible one at ``/v1``, the Anthropic one at the same
    server's ``/v1/messages``. A reply with nothing usable is retried twice, briefly, before the
    fallback answers: the model is deterministic, so more tries only take longer."""
    provider = request.param
    if provider == "anthropic" and MODEL.key != DEFAULT_MODEL:
        pytest.skip("the Anthropic run uses the default model: no packaged model honours the "
                    "forced envelope tool, so it shows the fallback path, fastest with SmolLM2")
    folder = tmp_path_factory.mktemp(f"dev-real-model-{provider}")
    env = {**server_env(database_url, kafka_bootstrap, f"real-model-{provider}"),
           "TURNFLOW_MODEL": MODEL_NAME, "TURNFLOW_MODEL_MAX_TOKENS": "128",
           "TURNFLOW_MODEL_TIMEOUT": "300", "MAX_RETRIES": "2", "RETRY_BACKOFF_MS": "200"}
    if provider == "openai":
        env["OPENAI_BASE_URL"] = llama_server.base_url
    else:  # llama.cpp's server takes any key when it was started without one
        env |= {"ANTHROPIC_BASE_URL": llama_server.url, "ANTHROPIC_API_KEY": "local-server"}
    started = time.monotonic()
    run = run_dev("--script", str(DEMO_CHAT), "--data-dir", str(folder), env=env, timeout=2700)
    return DemoRun(provider, run, time.monotonic() - started)


def test_every_message_is_answered_and_none_is_lost(demo_run: DemoRun) -> None:
    """Each scripted message got at least one reply of its own (the model's or the fallback
    message), nothing was dead-lettered or left without a turn, and the command exited 0 with
    the real model named in its banner."""
    run = demo_run.run
    transcript = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.code == 0, transcript
    assert run.error_lines == [], transcript
    assert re.search(demo_run.banner, run.stdout), run.stdout[:800]
    assert not [marker for marker in LOST if marker in run.stdout], transcript
    got = answers(run.stdout)
    assert [a.text for a in got] == _messages(), transcript
    assert [a.text for a in got if not a.replies] == [], transcript
    fallback = Settings.model_fields["model_fallback_message"].default
    fell_back = sum(fallback in reply for a in got for reply in a.replies)
    print(run.stdout)
    print(f"turnflow dev --script examples/demo.chat with {MODEL_NAME} through the "
          f"{demo_run.provider} provider: {demo_run.seconds:.1f}s, "
          f"{len(got)} messages answered, {fell_back} replies were the fallback message")


def test_the_repair_is_booked_where_the_model_can(demo_run: DemoRun) -> None:
    """A model able to run the demo books the brakes on Saturday and the payment is
    acknowledged. SmolLM2 cannot (it reads every message the same way and may book a repair
    nobody asked for): the test says so and skips; the guarantees above still hold."""
    run = demo_run.run
    said = [line.removeprefix("ana> ") for line in run.stdout.splitlines()
            if line.startswith("ana> ")]
    booked = [text for text in said if BOOKING_REF.search(text)]
    if demo_run.provider == "anthropic":
        pytest.skip(f"{MODEL_NAME} does not honour the Anthropic provider's forced envelope "
                    "tool, so only the customer-facing guarantees hold through it")
    if MODEL.books_the_demo:
        assert booked, run.stdout[-6000:]
        assert "brakes" in booked[0].lower() and "saturday" in booked[0].lower(), booked
        assert any("payment received" in text.lower() for text in said), run.stdout[-6000:]
    else:
        asked = [text for text in booked if "brakes" in text.lower() and "saturday" in text.lower()]
        pytest.skip(f"{MODEL_NAME} is not able to book the demo: {len(booked)} bookings made, "
                    f"{len(asked)} of them the brakes on Saturday the customer asked for; "
                    "TURNFLOW_LOCAL_MODEL=qwen2.5-coder-1.5b books it")


def test_no_broken_reply_is_printed_as_the_agents_words(demo_run: DemoRun) -> None:
    """Not one line the agent says opens like a JSON envelope or a code fence."""
    run = demo_run.run
    said = [line.removeprefix("ana> ") for line in run.stdout.splitlines()
            if line.startswith("ana> ")]
    assert said, run.stdout
    assert not [text for text in said if text.lstrip().startswith(("{", "[", "```"))]
