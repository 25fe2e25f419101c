"""The turnflow command line: registry, and one-line failures with the right exit codes."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from consumer import cli
from consumer.commands.topics import topic_specs
from consumer.settings import Settings

ENV = ("AGENT", "DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS", "METRICS_PORT")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("METRICS_PORT", "0")
    loggers = [logging.getLogger(), logging.getLogger("turnflow")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    yield
    for logger, handlers, level, propagate in saved:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def test_help_lists_every_registered_command(capsys: pytest.CaptureFixture[str]) -> None:
    """``turnflow --help`` names each registered command without importing them."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in out


def test_consume_without_agent_fails_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """No --agent and no AGENT: exit 2 and a single line saying what is missing."""
    assert cli.main(["consume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "agent" in err[0]


def test_consume_with_unimportable_agent_fails_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent path that does not import exits 2 with the reason on one line."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert cli.main(["consume", "--agent", "no_such_module_xyz:agent"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_module_xyz" in err[0]


def test_consume_with_unreachable_servers_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Servers that do not answer make ``consume`` exit 1 with one line, not a traceback."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert cli.main(["consume", "--agent", "tests.integration.harness:counting_agent"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("turnflow: ")


@pytest.mark.parametrize("workers", ["1", "3"])
def test_consume_workers_with_unreachable_servers_exit_once(
    workers: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With one worker or several, unreachable servers end ``consume`` with exit 1 and one
    line, before any worker starts (a supervisor would otherwise restart them forever)."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    args = ["consume", "--workers", workers, "--agent", "tests.integration.harness:counting_agent"]
    assert cli.main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("turnflow: ")


def test_migrate_without_database_url_fails(capsys: pytest.CaptureFixture[str]) -> None:
    """``migrate`` with no DATABASE_URL exits 2 and says so."""
    assert cli.main(["migrate"]) == 2
    assert "DATABASE_URL" in capsys.readouterr().err


def test_topic_specs_follow_the_settings() -> None:
    """``topics`` creates the four configured topics with the configured partition count."""
    settings = Settings(inbound_topic="in", messages_topic="m", schedule_topic="s",
                        dlq_topic="d", topic_partitions=6)
    specs = topic_specs(settings)
    assert [(s.name, s.partitions) for s in specs] == [("in", 6), ("m", 6), ("s", 6), ("d", 6)]
    assert topic_specs(settings, 2)[0].partitions == 2
