"""Settings from the env, JSON logs without content, and the health endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from consumer.health import HealthServer
from consumer.logs import MAX_FIELD_CHARS, SAFE_FIELDS, JsonFormatter
from consumer.settings import Settings, env_table


def test_settings_read_the_documented_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upper-case env variables fill the fields of the same name."""
    monkeypatch.setenv("MAX_IN_FLIGHT", "7")
    monkeypatch.setenv("INBOUND_TOPIC", "in.x")
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "svc")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "hunter2")
    settings = Settings()
    assert (settings.max_in_flight, settings.inbound_topic) == (7, "in.x")
    options = settings.kafka_client_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_plain_password"] == "hunter2"
    assert "ssl_context" in options


def test_secrets_never_show_in_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SASL password does not appear in the settings' repr or str."""
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "hunter2")
    settings = Settings()
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)


def test_password_may_come_from_a_mounted_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """KAFKA_SASL_PASSWORD_FILE supplies the password when the variable itself is unset."""
    secret = tmp_path / "password"
    secret.write_text("from-file\n")
    monkeypatch.delenv("KAFKA_SASL_PASSWORD", raising=False)
    monkeypatch.setenv("KAFKA_SASL_PASSWORD_FILE", str(secret))
    settings = Settings()
    assert settings.kafka_sasl_password is not None
    assert settings.kafka_sasl_password.get_secret_value() == "from-file"


def test_an_unreadable_password_file_is_a_bad_setting_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """KAFKA_SASL_PASSWORD_FILE naming a missing file or a directory is a validation error of
    that variable (what ``turnflow`` reports as a bad setting), not an ``OSError``; it is not
    read when KAFKA_SASL_PASSWORD itself is set."""
    monkeypatch.delenv("KAFKA_SASL_PASSWORD", raising=False)
    for path in (tmp_path / "missing", tmp_path):
        monkeypatch.setenv("KAFKA_SASL_PASSWORD_FILE", str(path))
        with pytest.raises(ValidationError) as refused:
            Settings()
        (error,) = refused.value.errors()
        assert error["loc"] == ("kafka_sasl_password_file",)
        assert f"cannot read {path}" in error["msg"]
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "direct")
    settings = Settings()
    assert settings.kafka_sasl_password is not None
    assert settings.kafka_sasl_password.get_secret_value() == "direct"


def test_log_level_is_a_logging_level_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOG_LEVEL takes the five logging levels in any case; anything else is a bad setting
    here rather than a ``ValueError`` from ``configure_logging`` once the service starts."""
    monkeypatch.setenv("LOG_LEVEL", " debug ")
    assert Settings().log_level == "DEBUG"
    for bad in ("foo", "", "10"):
        monkeypatch.setenv("LOG_LEVEL", bad)
        with pytest.raises(ValidationError, match="log_level"):
            Settings()


@pytest.mark.parametrize("name", ["MODEL_RECORDING_RETENTION_DAYS", "OUTBOX_RETENTION_DAYS"])
@pytest.mark.parametrize("raw", ["inf", "nan", "1e10", "36501", "-1"])
def test_retention_days_are_finite_and_bounded(
    name: str, raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retention that would overflow ``timedelta`` when the relay starts is a bad setting."""
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValidationError, match=name.lower()):
        Settings()


def test_the_longest_retention_is_a_hundred_years(monkeypatch: pytest.MonkeyPatch) -> None:
    """36500 days is taken, and both retentions turn into a ``timedelta``."""
    monkeypatch.setenv("MODEL_RECORDING_RETENTION_DAYS", "36500")
    monkeypatch.setenv("OUTBOX_RETENTION_DAYS", "36500")
    settings = Settings()
    assert settings.recording_retention() == settings.outbox_retention() == timedelta(days=36500)


def test_env_table_documents_every_setting() -> None:
    """The README's and docs/production.md's tables hold every setting's row exactly as the
    settings describe it: name, default and meaning."""
    table = env_table()
    for name in Settings.model_fields:
        assert f"`{name.upper()}`" in table
    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/production.md"):
        text = (root / doc).read_text(encoding="utf-8")
        missing = [row for row in table.splitlines()[2:] if row not in text]
        assert not missing, f"{doc} lacks or differs in: {missing}"


def log_line(**extra: object) -> dict[str, object]:
    record = logging.LogRecord("turnflow.test", logging.INFO, __file__, 1, "turn applied",
                               None, None)
    record.__dict__.update(extra)
    return json.loads(JsonFormatter().format(record))  # type: ignore[no-any-return]


def test_json_logs_carry_ids_and_drop_content() -> None:
    """Session and input ids are written; message text or secrets passed as extras are not."""
    line = log_line(session_id="s1", input_id="m1", text="meu cartão 4111", password="x")
    assert line["session_id"] == "s1" and line["input_id"] == "m1"
    assert "4111" not in json.dumps(line) and "password" not in line
    assert line["message"] == "turn applied" and line["level"] == "INFO"


def test_health_routes() -> None:
    """/healthz is always ok, /readyz follows readiness, /metrics exposes turnflow metrics."""
    ready = {"value": False}
    server = HealthServer(host="127.0.0.1", port=0, ready=lambda: ready["value"])
    assert server.respond("GET /healthz HTTP/1.1")[0] == 200
    assert server.respond("GET /readyz HTTP/1.1")[0] == 503
    ready["value"] = True
    assert server.respond("GET /readyz HTTP/1.1")[0] == 200
    status, _ctype, body = server.respond("GET /metrics HTTP/1.1")
    assert status == 200 and b"turnflow_turns_total" in body
    assert server.respond("GET /nope HTTP/1.1")[0] == 404
    assert server.respond("POST /healthz HTTP/1.1")[0] == 405


async def test_health_server_answers_over_http() -> None:
    """The server answers a real HTTP request on its port."""
    server = await HealthServer(host="127.0.0.1", port=0, ready=lambda: True).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        response = await reader.read()
        writer.close()
        await writer.wait_closed()
    finally:
        await server.stop()
    assert response.startswith(b"HTTP/1.0 200") and response.endswith(b"ready\n")


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """Whatever ``configure_logging`` changes (handlers, levels, the record flags) is put back,
    so the rest of the suite logs as before."""
    loggers = [logging.getLogger(name) for name in (None, "turnflow", "turnflow.test")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    flags = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")
    saved_flags = {name: getattr(logging, name) for name in flags}
    yield
    for logger, handlers, level, propagate in saved:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
    for name, value in saved_flags.items():
        setattr(logging, name, value)


def test_configure_logging_twice_keeps_one_handler(logging_restored: None) -> None:
    """Configuring logs again replaces its own handler instead of doubling every line."""
    from consumer.logs import configure_logging

    configure_logging("DEBUG")
    configure_logging("INFO")
    for logger in (logging.getLogger(), logging.getLogger("turnflow")):
        ours = [h for h in logger.handlers if h.get_name() == "turnflow-json"]
        assert len(ours) == 1
    assert logging.getLogger("turnflow").level == logging.INFO


def test_configured_lines_skip_the_caller_lookups(logging_restored: None) -> None:
    """The service's lines hold no file, line, thread or process, so once configured a record
    does not look them up (each is a cost on every turn's line)."""
    from consumer.logs import JsonFormatter, configure_logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    configure_logging("INFO")
    logger = logging.getLogger("turnflow.test")
    logger.addHandler(Keep())
    logger.info("turn applied", extra={"session_id": "s1", "version": 2})
    (record,) = records
    assert (record.lineno, record.funcName) == (0, "(unknown function)")
    assert record.thread is None and record.process is None
    line = json.loads(JsonFormatter().format(record))
    assert (line["message"], line["session_id"], line["version"]) == ("turn applied", "s1", 2)


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    response = await reader.read()
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    return response


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"414"),
        (b"GET /healthz HTTP/1.1\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n", b"431"),
    ],
)
async def test_over_long_request_lines_are_answered_without_an_unhandled_error(
    request_bytes: bytes, status: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A request line or header over 64 KB gets an HTTP error status, nothing is logged as an
    unhandled exception, and the port keeps answering the next request."""
    server = await HealthServer(host="127.0.0.1", port=0, ready=lambda: True).start()
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        with caplog.at_level(logging.DEBUG):
            response = await _exchange(server.port, request_bytes)
            after = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
    finally:
        loop.set_exception_handler(None)
        await server.stop()
    assert response.startswith(b"HTTP/1.0 " + status)
    assert after.startswith(b"HTTP/1.0 200")
    assert unhandled == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_log_lines_are_bounded_whatever_the_ids_hold() -> None:
    """A 60 KB wake key in an id field gives a line of a few hundred characters that says how
    much was cut, and a lone surrogate in a field is escaped rather than breaking the line."""
    key = "wake:" + "k" * 60_000
    line = JsonFormatter().format(_record(input_id=key, session_id="b-sur\ud800sid",
                                          partitions=list(range(500))))
    assert len(line) < 2000
    parsed = json.loads(line)
    assert parsed["input_id"].endswith(f"...(+{len(key) - MAX_FIELD_CHARS} chars)")
    line.encode("utf-8")  # writable as UTF-8
    assert parsed["session_id"] == "b-sur\\ud800sid"


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("turnflow.test", logging.INFO, __file__, 1, "turn applied",
                               None, None)
    record.__dict__.update(extra)
    return record


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_log_time_is_the_records_time_in_utc_to_the_millisecond(created: float) -> None:
    """The formatter's per-second cache writes the same time as formatting it afresh."""
    formatter = JsonFormatter()
    for moment in (created, created + 0.25, created + 1.5):  # a cached second, then a new one
        record = _record()
        record.created = moment
        expected = datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds")
        assert json.loads(formatter.format(record))["time"] == expected


@given(st.dictionaries(st.sampled_from(sorted(SAFE_FIELDS)),
                       st.none() | st.booleans() | st.integers() | st.floats() | st.text()
                       | st.lists(st.text(max_size=3), max_size=60)))
def test_any_safe_field_value_makes_one_bounded_json_line(extra: dict[str, object]) -> None:
    """Whatever a field holds (any unicode, lone surrogates, NaN, long lists), the line is
    one JSON object, writable as UTF-8, with every string cut to the field limit."""
    line = JsonFormatter().format(_record(**extra))
    assert "\n" not in line
    line.encode("utf-8")
    parsed = json.loads(line)
    for name, value in extra.items():
        shown = parsed[name]
        if isinstance(value, str):
            assert len(shown) <= MAX_FIELD_CHARS + len(f"...(+{len(value)} chars)") + 5 * len(value)
            if len(value) <= MAX_FIELD_CHARS and value.isascii():
                assert shown == value
        elif isinstance(value, list):
            assert len(shown) <= 51
        elif isinstance(value, float) and not math.isfinite(value):
            assert shown is None  # NaN and infinities are not JSON: written as null
        else:
            assert shown == value
    json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))


@pytest.mark.parametrize("raw", ["week", "", "DAY ", "months", "0"])
def test_a_turn_partition_other_than_month_or_day_is_refused(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURN_PARTITION", raw)
    with pytest.raises(ValidationError, match="turn_partition"):
        Settings()


@pytest.mark.parametrize("raw", ["month", "day"])
def test_a_turn_partition_of_a_month_or_a_day_is_taken(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURN_PARTITION", raw)
    assert Settings().turn_partition == raw
