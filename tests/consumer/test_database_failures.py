"""A database error that ends a command names its cause, in one line, with its exit code
(consumer/cli/database_failures.py): over asyncpg's error classes, over real refusals of the
test PostgreSQL, and over arbitrary messages and SQLSTATEs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from consumer.cli.database_failures import EXIT_REFUSED, EXIT_SCHEMA, describe
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, run_service
from store import Store, TimerEntry
from tests.fixtures.pgbouncer import transaction_pooler

KINDS = {"unreachable", "authentication", "no-database", "pooler", "schema", "permission",
         "read-only", "refused"}


@pytest.mark.parametrize(("error", "kind", "code"), [
    (asyncpg.InvalidPasswordError('password authentication failed for user "t"'),
     "authentication", EXIT_CONFIG),
    (asyncpg.InvalidAuthorizationSpecificationError('role "t" does not exist'),
     "authentication", EXIT_CONFIG),
    (asyncpg.ProtocolViolationError("SASL authentication failed"), "authentication",
     EXIT_CONFIG),
    (asyncpg.InvalidCatalogNameError('database "t" does not exist'), "no-database", EXIT_CONFIG),
    (asyncpg.DuplicatePreparedStatementError(
        'prepared statement "__asyncpg_stmt_1__" already exists'), "pooler", EXIT_CONFIG),
    (asyncpg.InvalidSQLStatementNameError(
        'prepared statement "__asyncpg_stmt_a__" does not exist'), "pooler", EXIT_CONFIG),
    (asyncpg.UndefinedTableError('relation "sessions" does not exist'), "schema", EXIT_SCHEMA),
    (asyncpg.UndefinedColumnError('column "trace_id" does not exist'), "schema", EXIT_SCHEMA),
    (asyncpg.InsufficientPrivilegeError("permission denied for table sessions"),
     "permission", EXIT_REFUSED),
    (asyncpg.ReadOnlySQLTransactionError(
        "cannot execute INSERT in a read-only transaction"), "read-only", EXIT_REFUSED),
    (asyncpg.PostgresSyntaxError('syntax error at or near "SELEC"'), "refused", EXIT_REFUSED),
    (asyncpg.DiskFullError("could not extend file"), "refused", EXIT_REFUSED),
    (asyncpg.CannotConnectNowError("the database system is starting up"),
     "unreachable", EXIT_UNREACHABLE),
    (asyncpg.AdminShutdownError("terminating connection due to administrator command"),
     "unreachable", EXIT_UNREACHABLE),
    (asyncpg.TooManyConnectionsError("sorry, too many clients already"),
     "unreachable", EXIT_UNREACHABLE),
    (asyncpg.ProtocolViolationError("no more connections allowed (max_client_conn)"),
     "unreachable", EXIT_UNREACHABLE),
    (asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
     "unreachable", EXIT_UNREACHABLE),
])
def test_each_driver_error_class_has_its_cause(
    error: Exception, kind: str, code: int
) -> None:
    """Each asyncpg error class, raw or under SQLAlchemy's error as the store raises it, gets
    its kind and exit code, and the line holds the server's message."""
    for raised in (error, DBAPIError("SELECT 1", None, error)):
        failure = describe(raised)
        assert (failure.kind, failure.exit_code) == (kind, code)
        assert str(error.args[0]) in failure.line
        assert "\n" not in failure.line


def test_an_error_without_a_sqlstate_is_an_outage() -> None:
    """A dropped connection or a timeout (no SQLSTATE) is reported as unreachable, naming the
    driver's error."""
    failure = describe(OperationalError("SELECT 1", None, TimeoutError("timed out")))
    assert failure.kind == "unreachable"
    assert failure.exit_code == EXIT_UNREACHABLE
    assert "TimeoutError: timed out" in failure.line


class _Hostile(Exception):
    def __init__(self, sqlstate: object, message: object) -> None:
        super().__init__()
        self.sqlstate = sqlstate
        self.message = message


@given(
    sqlstate=st.one_of(st.none(), st.text(max_size=8), st.integers(), st.binary(max_size=5)),
    message=st.one_of(st.none(), st.text(max_size=2000), st.integers()),
    wrapped=st.booleans(),
)
def test_arbitrary_messages_and_sqlstates_never_break_the_report(
    sqlstate: object, message: object, wrapped: bool
) -> None:
    """Whatever SQLSTATE and message an error carries, the report is one line of bounded
    length, of a known kind, and never raises."""
    error: Exception = _Hostile(sqlstate, message)
    if wrapped:
        error = DBAPIError("SELECT 1", None, error)
    failure = describe(error)
    assert failure.kind in KINDS
    assert "\n" not in failure.line and "\r" not in failure.line
    assert len(failure.line) < 600


# -- real refusals of the test PostgreSQL ------------------------------------------------------


async def _admin(url: str, sql: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


def _as(url: str, user: str, database: str | None = None) -> str:
    changed = make_url(url).set(username=user)
    if database is not None:
        changed = changed.set(database=database)
    return changed.render_as_string(hide_password=False)


@pytest.fixture
async def role(database_url: str) -> AsyncIterator[str]:
    """A fresh login role with no grant on turnflow's tables, dropped afterwards."""
    name = f"tf_role_{uuid.uuid4().hex[:8]}"
    await _admin(database_url, f"CREATE ROLE {name} LOGIN")
    try:
        yield name
    finally:
        await _admin(database_url, f"DROP OWNED BY {name}; DROP ROLE {name}")


async def _failure_of(call: Callable[[], Awaitable[object]]) -> BaseException:
    try:
        await call()
    except Exception as error:
        return error
    raise AssertionError("the call did not fail")


async def test_a_role_without_grants_is_denied_permission(database_url: str, role: str) -> None:
    """A role with no grant on the tables: the report says permission denied, names the
    table, and exits 5."""
    store = await Store.connect(_as(database_url, role), pool_size=1)
    try:
        failure = describe(await _failure_of(lambda: store.load("s1")))
    finally:
        await store.close()
    assert (failure.kind, failure.exit_code) == ("permission", EXIT_REFUSED)
    assert "permission denied" in failure.line and "42501" in failure.line


async def test_a_read_only_role_is_told_to_use_the_primary(database_url: str, role: str) -> None:
    """A role whose transactions are read-only (as on a standby): a write is reported as a
    read-only database, with the server's words, exit 5."""
    await _admin(database_url, f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}; "
                               f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}; "
                               f"ALTER ROLE {role} SET default_transaction_read_only = on")
    store = await Store.connect(_as(database_url, role), pool_size=1)
    try:
        entry = TimerEntry(key="k", session_id="s1", at=datetime.now(UTC))
        failure = describe(await _failure_of(lambda: store.upsert_timers([entry])))
    finally:
        await store.close()
    assert (failure.kind, failure.exit_code) == ("read-only", EXIT_REFUSED)
    assert "read-only transaction" in failure.line and "primary" in failure.line


async def test_a_database_without_tables_says_run_migrate(database_url: str) -> None:
    """A database never migrated: the report names the missing relation and says to run
    `turnflow migrate`, exit 4."""
    name = f"tf_empty_{uuid.uuid4().hex[:8]}"
    await _admin(database_url, f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        store = await Store.connect(_as(database_url, "postgres", name), pool_size=1)
        try:
            failure = describe(await _failure_of(lambda: store.load("s1")))
        finally:
            await store.close()
    finally:
        await _admin(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')
    assert (failure.kind, failure.exit_code) == ("schema", EXIT_SCHEMA)
    assert "does not exist" in failure.line and "turnflow migrate" in failure.line


async def test_a_wrong_password_is_a_refused_login(database_url: str) -> None:
    """A wrong password, refused by PgBouncer with SCRAM in front of the test server (which
    itself trusts every client): exit 2, saying the login was refused, not that PostgreSQL is
    unreachable."""
    with transaction_pooler(database_url, pool_size=1, password="right") as pooler:
        wrong = make_url(pooler.url).set(password="wrong").render_as_string(hide_password=False)
        error = await _failure_of(
            lambda: Store.connect(wrong, pool_size=1, pooler="transaction")
        )
        right = await Store.connect(pooler.url, pool_size=1, pooler="transaction")
        await right.close()
    failure = describe(error)
    assert (failure.kind, failure.exit_code) == ("authentication", EXIT_CONFIG)
    assert "authentication failed" in failure.line and "wrong" not in failure.line


async def test_a_missing_database_is_a_setting_to_fix(database_url: str) -> None:
    """Connecting to a database that does not exist: exit 2, naming the database."""
    missing = f"tf_missing_{uuid.uuid4().hex[:8]}"
    error = await _failure_of(
        lambda: Store.connect(_as(database_url, "postgres", missing), pool_size=1)
    )
    failure = describe(error)
    assert (failure.kind, failure.exit_code) == ("no-database", EXIT_CONFIG)
    assert missing in failure.line


def test_a_service_ending_on_a_refusal_exits_with_its_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A long-running command whose run raises the store's error for a missing table prints
    the one-line cause on stderr and exits 4, not "unreachable"."""
    error = ProgrammingError(
        "SELECT", None, asyncpg.UndefinedTableError('relation "sessions" does not exist')
    )

    async def run() -> int:
        await asyncio.sleep(0)
        raise error

    assert run_service(run, lambda: None) == EXIT_SCHEMA
    err = capsys.readouterr().err.strip()
    assert err.startswith("turnflow: the database schema is missing or behind")
    assert "unreachable" not in err and len(err.splitlines()) == 1


async def test_a_one_shot_command_names_the_cause_too(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``turnflow inspect`` on a database never migrated keeps its exit code (1) and says the
    schema is missing and to run `turnflow migrate`, instead of a driver class name."""
    from consumer import cli

    name = f"tf_empty_{uuid.uuid4().hex[:8]}"
    await _admin(database_url, f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        monkeypatch.delenv("INSPECT_DATABASE_URL", raising=False)
        monkeypatch.setenv("DATABASE_URL", _as(database_url, "postgres", name))
        code = await asyncio.to_thread(cli.main, ["inspect", "--limit", "1"])
    finally:
        await _admin(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE
    assert "schema is missing" in err and "turnflow migrate" in err
