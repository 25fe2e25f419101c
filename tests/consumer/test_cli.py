"""The turnflow command line: registry, and one-line failures with the right exit codes."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from consumer import cli
from consumer.cli.topics import topic_specs
from consumer.settings import Settings

ENV = ("AGENT", "DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS", "METRICS_PORT",
       "KAFKA_SECURITY_PROTOCOL", "MAX_IN_FLIGHT", "LOG_LEVEL", "KAFKA_SASL_PASSWORD",
       "KAFKA_SASL_PASSWORD_FILE", "MODEL_RECORDING_RETENTION_DAYS", "OUTBOX_RETENTION_DAYS",
       "DATABASE_POOLER", "MIGRATE_DATABASE_URL")


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


def test_migrate_through_a_transaction_pooler_needs_a_direct_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``migrate`` with ``DATABASE_POOLER=transaction`` and no ``MIGRATE_DATABASE_URL`` exits 2
    naming the setting, before it connects anywhere."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("DATABASE_POOLER", "transaction")
    assert cli.main(["migrate"]) == 2
    assert "MIGRATE_DATABASE_URL" in capsys.readouterr().err


def test_topic_specs_follow_the_settings() -> None:
    """``topics`` creates the four configured topics with the configured partition count."""
    settings = Settings(inbound_topic="in", messages_topic="m", schedule_topic="s",
                        dlq_topic="d", topic_partitions=6)
    specs = topic_specs(settings)
    assert [(s.name, s.partitions) for s in specs] == [("in", 6), ("m", 6), ("s", 6), ("d", 6)]
    assert topic_specs(settings, 2)[0].partitions == 2


def test_each_service_has_its_own_default_metrics_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without METRICS_PORT, consume, schedule and relay default to 9100, 9200 and 9300, so
    they run side by side on one machine; METRICS_PORT sets one port for whichever runs."""
    monkeypatch.delenv("METRICS_PORT")
    unset = Settings()
    ports = [unset.metrics_port_for(p) for p in ("consume", "schedule", "relay")]
    assert ports == [9100, 9200, 9300]
    assert {Settings(metrics_port=9400).metrics_port_for(p) for p in ("consume", "schedule")} == {
        9400
    }


@pytest.mark.parametrize("command", [["schedule"], ["consume", "--agent",
                                                     "tests.integration.harness:counting_agent"]])
def test_a_metrics_port_in_use_says_address_in_use(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A metrics port another process holds stops the service with one line naming the port as
    in use, not a server as unreachable."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("METRICS_PORT", str(port))
        monkeypatch.setenv("METRICS_HOST", "127.0.0.1")
        monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
        monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
        assert cli.main(command) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"metrics port 127.0.0.1:{port}: address in use" in err[0]
    assert "unreachable" not in err[0]


@pytest.mark.parametrize("command", ["consume", "schedule", "relay", "migrate"])
def test_a_bad_setting_fails_with_one_line_naming_it(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An invalid setting exits 2 with one line naming each bad variable, not a traceback,
    and without echoing the value (it could be a secret pasted into the wrong variable)."""
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "tokio-secret-value")
    monkeypatch.setenv("MAX_IN_FLIGHT", "-1")
    assert cli.main([command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("turnflow: bad setting:")
    assert "KAFKA_SECURITY_PROTOCOL" in err[0] and "MAX_IN_FLIGHT" in err[0]
    assert "tokio-secret-value" not in err[0]


@pytest.mark.parametrize("command", ["consume", "schedule", "relay", "topics"])
@pytest.mark.parametrize(
    ("name", "raw"),
    [("LOG_LEVEL", "foo"), ("KAFKA_SASL_PASSWORD_FILE", "/nonexistent/turnflow-password"),
     ("MODEL_RECORDING_RETENTION_DAYS", "inf"), ("OUTBOX_RETENTION_DAYS", "1e10")],
)
def test_a_bad_log_level_password_file_or_retention_is_a_bad_setting(
    command: str, name: str, raw: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Values that used to pass the settings and fail later with a traceback (an unknown log
    level, a missing password file, a retention ``timedelta`` cannot hold) exit 2 with the
    usual one line naming the variable."""
    monkeypatch.setenv(name, raw)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("AGENT", "tests.integration.harness:counting_agent")
    assert cli.main([command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"turnflow: bad setting: {name}:")


@pytest.mark.parametrize(
    "argv",
    [["prune", "--older-than-days", "inf"], ["prune", "--older-than-days", "nan"],
     ["prune", "--older-than-days", "1e10"], ["prune", "--outbox-older-than-days", "-1"],
     ["topics", "--partitions", "0"], ["topics", "--partitions", "-3"]],
)
def test_out_of_range_numbers_are_refused_with_the_arguments(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prune age ``timedelta`` cannot hold (or a negative one) and a partition count below 1
    exit 2 naming the option, before any server is contacted (0 partitions used to mean the
    default unseen, a negative count reached the broker)."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert f"argument {argv[1]}: must be" in capsys.readouterr().err


def test_topic_specs_take_the_partitions_asked_for_even_one() -> None:
    """An explicit count is used as given; only None falls back to TOPIC_PARTITIONS."""
    settings = Settings(topic_partitions=6)
    assert topic_specs(settings, 1)[0].partitions == 1
    assert topic_specs(settings, None)[0].partitions == 6


@pytest.mark.parametrize("max_idle", ["nan", "inf", "0", "-1"])
def test_schedule_refuses_a_max_idle_that_is_not_a_finite_positive_number(
    max_idle: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--max-idle nan`` passed the ``<= 0`` check; now it exits 2 as 0 does."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    assert cli.main(["schedule", "--max-idle", max_idle]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "--max-idle must be positive" in err[0]


_ENV_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)


@settings(max_examples=150, deadline=None)
@given(protocol=_ENV_TEXT, max_in_flight=_ENV_TEXT)
def test_any_setting_value_is_taken_or_refused_by_name(protocol: str, max_in_flight: str) -> None:
    """Arbitrary text in the environment: the settings load, or the refusal names each bad
    variable on one line (what ``turnflow`` prints) and never fails on its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKA_SECURITY_PROTOCOL", protocol)
        mp.setenv("MAX_IN_FLIGHT", max_in_flight)
        try:
            loaded = Settings()
        except ValidationError as exc:
            problems = cli.settings_problems(exc)
            assert "\n" not in problems
            named = {p.split(":", 1)[0] for p in problems.split("; ")}
            assert named and named <= {"KAFKA_SECURITY_PROTOCOL", "MAX_IN_FLIGHT"}
        else:
            assert loaded.kafka_security_protocol in (
                "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
            )
            assert loaded.max_in_flight >= 1
