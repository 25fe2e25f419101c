"""``turnflow dev --script`` end to end: the demo agent through the real topics and database.

The chat's lines go to ``inbound.turns`` and its replies come back from ``outbound.messages``, so
these tests pin the whole pipe a newcomer sees, including a timer the user never asked for.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.consumer.dev_process import DevRun, run_dev, server_env

pytestmark = pytest.mark.integration

SCRIPT = """\
# comments and blank lines are skipped

hi
my name is Sam
I need the brakes fixed on saturday
yes
/event paid {"amount": 45}
/wait 8
"""


def _replies(run: DevRun) -> list[str]:
    return [line.removeprefix("ana> ") for line in run.stdout.splitlines()
            if line.startswith("ana> ")]


@pytest.fixture(scope="module")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory, database_url: str, kafka_bootstrap: str
) -> DevRun:
    """One scripted conversation with the demo agent, shared by the assertions below."""
    folder = tmp_path_factory.mktemp("dev")
    script = folder / "demo.chat"
    script.write_text(SCRIPT)
    return run_dev("--script", str(script), "--data-dir", str(folder),
                   env=server_env(database_url, kafka_bootstrap, "demo"))


def test_the_script_runs_to_the_end(demo_run: DevRun) -> None:
    """Every scripted input got its turn and replies, so the command exits 0 and says nothing."""
    assert demo_run.code == 0, demo_run.stdout + demo_run.stderr
    assert demo_run.error_lines == []


def test_start_says_which_model_and_servers(demo_run: DevRun) -> None:
    """The banner names the agent, the offline provider, and the servers the env pointed at."""
    assert "  agent     examples.demo_agent:agent (Ana)" in demo_run.stdout
    assert "  model     offline RuleProvider" in demo_run.stdout
    assert "(DATABASE_URL)" in demo_run.stdout
    assert "(KAFKA_BOOTSTRAP_SERVERS)" in demo_run.stdout


def test_replies_come_back_through_the_topics_in_order(demo_run: DevRun) -> None:
    """The demo agent's replies arrive from outbound.messages in conversation order."""
    replies = _replies(demo_run)
    booked = next(r for r in replies if r.startswith("Booked:"))
    assert replies == [
        "Hi! I'm Ana from Spoke & Chain bike repair.",
        "Could you tell me your first name?",
        "Nice to meet you, Sam.",
        "Which service does the bike need: a tune-up, a flat-tire fix or brakes?",
        "Thank you, got it.",
        "Brake jobs take about two hours; please bring the bike in the morning.",
        "So: brakes on saturday. Shall I book it?",
        booked,
        "Payment received, thank you! See you on saturday.",
        "Still there? Just reply whenever you're ready.",
    ]
    pattern = r"Booked: brakes on saturday, reference R-[0-9A-F]{6}\. .* \(after 1500 ms\)"
    assert re.fullmatch(pattern, booked)


def test_each_turn_shows_its_outcomes_and_llm_calls(demo_run: DevRun) -> None:
    """Every turn ends with a footer of llm_calls and outcome lines, within the two-call budget."""
    footers = [line.strip() for line in demo_run.stdout.splitlines()
               if line.strip().startswith("[llm_calls=")]
    assert len(footers) == 6  # four messages, one event, one silence wake
    calls = [int(re.match(r"\[llm_calls=(\d+)", f).group(1)) for f in footers]  # type: ignore[union-attr]
    assert all(c <= 2 for c in calls)
    assert calls[-2:] == [0, 0]  # the event and the nudge are code only
    assert "booking/book action-ok" in footers[3]
    assert "booking/await_payment event-arrived (paid)" in footers[4]


def test_the_silence_follow_up_fires_without_input(demo_run: DevRun) -> None:
    """After the last reply, the scheduler fires the silence wake and the nudge is sent."""
    lines = demo_run.stdout.splitlines()
    fired = [i for i, line in enumerate(lines) if "[timer fired: silence:nudge:" in line]
    assert len(fired) == 1
    assert lines[fired[0] + 1] == "ana> Still there? Just reply whenever you're ready."


def test_the_portuguese_agent_by_flag(
    tmp_path: Path, database_url: str, kafka_bootstrap: str
) -> None:
    """--agent picks another agent; its replies come back the same way."""
    script = tmp_path / "pt.chat"
    script.write_text("oi\nmeu nome é Joana\n")
    run = run_dev("--agent", "examples.agente_pt:agente", "--script", str(script),
                  "--data-dir", str(tmp_path), env=server_env(database_url, kafka_bootstrap, "pt"))
    assert run.code == 0, run.stdout + run.stderr
    assert _replies(run)[0] == "Olá! Aqui é a Ana, da Clínica Sorriso."
    assert "Prazer, Joana! Vamos marcar sua avaliação." in _replies(run)


def test_a_second_run_on_the_same_session_is_answered(
    tmp_path: Path, database_url: str, kafka_bootstrap: str
) -> None:
    """``--session X`` run a second time against the same database: the second run's inputs
    carry ids of their own, so each is answered, not skipped as the first run's duplicate."""
    import uuid

    script = tmp_path / "again.chat"
    script.write_text("hi\nmy name is Sam\n")
    session = f"again-{uuid.uuid4().hex[:8]}"
    env = server_env(database_url, kafka_bootstrap, "again")
    runs = [run_dev("--script", str(script), "--session", session, "--data-dir", str(tmp_path),
                    env=env, timeout=120) for _ in range(2)]
    for run in runs:
        assert run.code == 0, run.stdout + run.stderr
        assert len(_replies(run)) >= 2, run.stdout
        assert "no reply" not in run.stdout.lower() and "timed out" not in run.stdout.lower()
    # the second run continues the conversation: the name is known, booking is asked about
    assert "Which service does the bike need" in " ".join(_replies(runs[1]))
