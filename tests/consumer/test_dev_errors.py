"""``turnflow dev`` fails in one clear line for what a newcomer meets, before anything runs."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest

from consumer.devchat.embedded_broker import free_port
from tests.consumer.dev_process import run_dev


def _one_line(run_code: int, lines: list[str]) -> str:
    assert run_code == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("turnflow dev: ")
    return lines[0]


def test_port_in_use(tmp_path: Path) -> None:
    """A metrics port held by another process is named, with the setting that moves it."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run = run_dev("--data-dir", str(tmp_path),
                      env={"METRICS_PORT": str(port), "METRICS_HOST": "127.0.0.1"})
    line = _one_line(run.code, run.error_lines)
    assert f"port {port} is in use (METRICS_PORT)" in line


def test_invalid_environment_variable(tmp_path: Path) -> None:
    """A setting that does not parse is named by its environment variable."""
    run = run_dev("--data-dir", str(tmp_path), env={"MAX_IN_FLIGHT": "lots"})
    line = _one_line(run.code, run.error_lines)
    assert "environment variable MAX_IN_FLIGHT is invalid" in line


def test_unreadable_password_file(tmp_path: Path) -> None:
    """A KAFKA_SASL_PASSWORD_FILE that is not there is named as that variable, with why."""
    missing = tmp_path / "no-password"
    run = run_dev("--data-dir", str(tmp_path), env={"KAFKA_SASL_PASSWORD_FILE": str(missing)})
    line = _one_line(run.code, run.error_lines)
    assert "environment variable KAFKA_SASL_PASSWORD_FILE is invalid" in line
    assert f"cannot read {missing}: No such file or directory" in line


@pytest.mark.parametrize("session", [" ", "", "s" * 257])
def test_a_session_id_the_consumer_would_refuse(
    session: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A blank or overlong --session is refused with the arguments (exit 2), not by every input
    of the chat waiting out its timeout."""
    from consumer.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["dev", "--session", session])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --session:" in err
    assert ("must not be blank" if not session.strip() else "longer than 256 characters") in err


def test_a_session_id_of_the_longest_length_is_taken() -> None:
    """256 characters, the parser's limit, is a session id ``dev`` runs with."""
    from consumer.cli import build_parser

    args = build_parser("dev").parse_args(["dev", "--session", "s" * 256])
    assert args.session == "s" * 256


def test_agent_that_needs_a_missing_environment_variable(tmp_path: Path) -> None:
    """An agent module reading an unset variable at import is reported as that variable."""
    (tmp_path / "needs_key.py").write_text(
        'import os\nKEY = os.environ["TURNFLOW_TEST_UNSET_KEY"]\nagent = None\n'
    )
    run = run_dev("--agent", "needs_key:agent", "--data-dir", str(tmp_path), cwd=tmp_path)
    line = _one_line(run.code, run.error_lines)
    assert "needs the environment variable TURNFLOW_TEST_UNSET_KEY, which is not set" in line


def test_agent_that_cannot_be_imported(tmp_path: Path) -> None:
    """A module that does not exist is named with the import error."""
    run = run_dev("--agent", "nowhere.to.be:agent", "--data-dir", str(tmp_path))
    line = _one_line(run.code, run.error_lines)
    assert "cannot import 'nowhere.to.be'" in line
    assert "No module named 'nowhere'" in line


def test_agent_that_does_not_validate_names_flow_and_step(tmp_path: Path) -> None:
    """A flow naming an unknown field fails at build time with the flow and the step named."""
    (tmp_path / "broken_agent.py").write_text(textwrap.dedent("""
        from engine import Agent
        agent = Agent(name="x", flows=[{"id": "greet", "on": [{"message": []}],
                                        "steps": [{"id": "ask", "collect": ["nome"]}]}])
    """))
    run = run_dev("--agent", "broken_agent:agent", "--data-dir", str(tmp_path), cwd=tmp_path)
    line = _one_line(run.code, run.error_lines)
    assert "agent broken_agent:agent is invalid" in line
    assert "flow 'greet'" in line and "step 'ask'" in line and "nome" in line


def test_unreachable_database(tmp_path: Path) -> None:
    """A DATABASE_URL nobody answers on is named by host and port, never by its password."""
    port = free_port()
    run = run_dev("--data-dir", str(tmp_path),
                  env={"DATABASE_URL": f"postgresql://postgres:s3cret@127.0.0.1:{port}/x"})
    line = _one_line(run.code, run.error_lines)
    assert f"cannot reach PostgreSQL at 127.0.0.1:{port} (DATABASE_URL)" in line
    assert "s3cret" not in run.stderr + run.stdout


@pytest.mark.integration
def test_unreachable_broker(tmp_path: Path, database_url: str) -> None:
    """With the database up, a broker address nobody answers on is named."""
    port = free_port()
    run = run_dev("--data-dir", str(tmp_path),
                  env={"DATABASE_URL": database_url,
                       "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"})
    line = _one_line(run.code, run.error_lines)
    assert f"cannot reach the Kafka broker at 127.0.0.1:{port} (KAFKA_BOOTSTRAP_SERVERS)" in line


def test_unreadable_script(tmp_path: Path) -> None:
    """A --script path that does not exist is refused before any server starts."""
    run = run_dev("--script", str(tmp_path / "missing.chat"), "--data-dir", str(tmp_path))
    line = _one_line(run.code, run.error_lines)
    assert "cannot read script" in line and "missing.chat" in line
