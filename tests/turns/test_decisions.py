"""The commit / retry / DLQ / abandon decision."""

from __future__ import annotations

import asyncpg
import pytest
from aiokafka.errors import MessageSizeTooLargeError
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import exc
from sqlalchemy.exc import DBAPIError, OperationalError

from consumer.errors import FencedPublishError, PublishError
from consumer.failures import cannot_succeed
from consumer.turns.decisions import (
    Abandon,
    Commit,
    DeadLetter,
    Fallback,
    Retry,
    RetryPolicy,
    VersionConflictsExhausted,
    decide,
)
from engine import ProviderError, TurnRequestError, UnusableReply

POLICY = RetryPolicy(max_retries=3, backoff_s=0.5, backoff_max_s=3.0)


def test_success_commits() -> None:
    """An attempt without error makes the offset eligible for commit."""
    assert decide(None, attempt=1, policy=POLICY) == Commit()


def test_an_outage_is_retried_for_its_whole_bound_then_answered_with_the_fallback() -> None:
    """A retryable model failure retries with doubling, capped delays for as long as the outage
    bound allows, however many attempts that takes, never to the DLQ; once the next delay
    would pass the bound, a message is answered with the fallback and any other input goes to
    the DLQ (there is nothing to answer)."""
    error = ProviderError("429", kind="retryable", status=429)
    policy = RetryPolicy(max_retries=3, backoff_s=0.5, backoff_max_s=3.0, model_outage_s=60.0)
    delays = [decide(error, attempt=n, policy=policy) for n in (1, 2, 3, 4, 50)]
    assert delays == [Retry(0.5, "provider-retryable"), Retry(1.0, "provider-retryable"),
                      Retry(2.0, "provider-retryable"), Retry(3.0, "provider-retryable"),
                      Retry(3.0, "provider-retryable")]
    assert decide(error, attempt=50, policy=policy, waited_s=56.9) == Retry(3.0,
                                                                            "provider-retryable")
    assert decide(error, attempt=51, policy=policy, waited_s=57.1) == Fallback("model-unavailable")
    other = decide(error, attempt=51, policy=policy, waited_s=57.1, answerable=False)
    assert isinstance(other, DeadLetter) and other.reason == "retries-exhausted"


def test_jitter_takes_at_most_its_share_of_the_delay() -> None:
    """The draw takes up to ``jitter`` of each delay away: never more, never a longer wait."""
    error = ProviderError("503", kind="retryable", status=503)
    policy = RetryPolicy(backoff_s=2.0, backoff_max_s=30.0, jitter=0.5)
    assert decide(error, attempt=1, policy=policy, draw=1.0) == Retry(2.0, "provider-retryable")
    assert decide(error, attempt=1, policy=policy, draw=0.0) == Retry(1.0, "provider-retryable")
    assert decide(error, attempt=2, policy=policy, draw=0.5) == Retry(3.0, "provider-retryable")
    assert RetryPolicy(jitter=0.0).delay(3, draw=0.0) == RetryPolicy().delay(3)


def test_an_unusable_reply_is_retried_by_count_then_answered_with_the_fallback() -> None:
    """A reply with nothing usable in it is not an outage: retried ``max_retries`` times (a model
    at temperature 0 gives the same reply), then the fallback answers, whatever the bound."""
    error = UnusableReply("openai: unusable reply: not JSON")
    assert decide(error, attempt=3, policy=POLICY) == Retry(2.0, "unusable-reply")
    assert decide(error, attempt=4, policy=POLICY) == Fallback("unusable-reply")
    other = decide(error, attempt=4, policy=POLICY, answerable=False)
    assert isinstance(other, DeadLetter) and other.reason == "retries-exhausted"


def test_retry_after_hint_is_respected() -> None:
    """The server's retry_after wins when it is longer than the backoff (within its ceiling)."""
    error = ProviderError("slow down", kind="retryable", retry_after=7.0)
    policy = RetryPolicy(max_retries=3, backoff_s=0.5, backoff_max_s=30.0)
    assert decide(error, attempt=1, policy=policy) == Retry(7.0, "provider-retryable")


def test_a_retry_after_past_the_backoff_ceiling_waits_the_ceiling() -> None:
    """RETRY_BACKOFF_MAX_MS is the ceiling, a server's hint included: a 429 asking for a day
    does not hold the session, and the partition's offset behind it, for a day."""
    error = ProviderError("slow down", kind="retryable", retry_after=86_400.0)
    assert decide(error, attempt=1, policy=POLICY) == Retry(POLICY.backoff_max_s,
                                                            "provider-retryable")


def test_fatal_provider_error_dead_letters_at_once() -> None:
    """A fatal model failure goes to the DLQ on the first attempt."""
    decision = decide(ProviderError("401", kind="fatal", status=401), attempt=1, policy=POLICY)
    assert decision == DeadLetter("provider-fatal", "model provider refused (status 401)")


def test_invalid_request_dead_letters_at_once() -> None:
    """A request the engine refuses is not retried."""
    decision = decide(TurnRequestError("two kinds", session_id="s1"), attempt=1, policy=POLICY)
    assert isinstance(decision, DeadLetter)
    assert decision.reason == "invalid-request"


def test_lost_partition_abandons() -> None:
    """A fenced publish abandons the input: no DLQ, no commit."""
    decision = decide(FencedPublishError("moved", session_id="s1"), attempt=1, policy=POLICY)
    assert isinstance(decision, Abandon)


@pytest.mark.parametrize(
    "error",
    [ConnectionRefusedError(), PublishError("no ack"),
     OperationalError("select", {}, Exception("down"))],
)
def test_infrastructure_failures_retry_without_limit(error: BaseException) -> None:
    """Database or broker outages retry forever with capped backoff instead of dead-lettering,
    paced by the outages before them, whatever the count of other failures."""
    assert decide(error, attempt=50, outages=49, policy=POLICY) == Retry(3.0, "infrastructure")
    assert decide(error, attempt=50, policy=POLICY) == Retry(0.5, "infrastructure")


def test_connection_lost_mid_statement_is_an_outage() -> None:
    """A database error raised on a connection the server cut (SQLAlchemy flags it
    ``connection_invalidated``) retries without limit; the same class on a live connection is
    bounded like any other failure."""
    lost = DBAPIError("save", {}, Exception("terminating connection"),
                      connection_invalidated=True)
    assert decide(lost, attempt=50, outages=49, policy=POLICY) == Retry(3.0, "infrastructure")
    alive = DBAPIError("save", {}, Exception("bad input"))
    assert isinstance(decide(alive, attempt=4, policy=POLICY), DeadLetter)


def test_version_conflicts_are_bounded() -> None:
    """Repeatedly losing the version race retries, then dead-letters."""
    error = VersionConflictsExhausted(session_id="s1", attempts=6)
    assert isinstance(decide(error, attempt=1, policy=POLICY), Retry)
    final = decide(error, attempt=4, policy=POLICY)
    assert isinstance(final, DeadLetter)
    assert final.reason == "version-conflicts"


def test_unexpected_errors_retry_then_dead_letter() -> None:
    """A bug-shaped exception is retried a bounded number of times, then dead-lettered."""
    assert isinstance(decide(KeyError("x"), attempt=1, policy=POLICY), Retry)
    final = decide(KeyError("x"), attempt=4, policy=POLICY)
    assert isinstance(final, DeadLetter)
    assert final.reason == "turn-failed"


def _db_error(orig: BaseException) -> DBAPIError:
    """A database error as SQLAlchemy raises it, wrapping the driver's."""
    return DBAPIError("INSERT ...", {}, orig)  # type: ignore[arg-type]


def _encode_failure() -> BaseException:
    """The driver's 22000 for a parameter it could not encode, caused by the codec's error."""
    try:
        "b-sur\ud800sid".encode("utf-8")
    except UnicodeEncodeError as codec:
        wrapped = asyncpg.exceptions.DataError("invalid input for query argument $1")
        wrapped.__cause__ = codec
        return _db_error(wrapped)
    raise AssertionError("a lone surrogate encoded")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (_db_error(asyncpg.exceptions.UntranslatableCharacterError("\\u0000 'card 4111'")),
         "unstorable-text"),
        (_db_error(asyncpg.exceptions.CharacterNotInRepertoireError("0x00 'card 4111'")),
         "unstorable-text"),
        (_encode_failure(), "unstorable-text"),
        (_db_error(asyncpg.exceptions.DatetimeFieldOverflowError("'card 4111'")), "out-of-range"),
        (_db_error(asyncpg.exceptions.NumericValueOutOfRangeError("'card 4111'")),
         "out-of-range"),
        (_db_error(asyncpg.exceptions.InvalidTextRepresentationError("'card 4111'")),
         "invalid-data"),
        (_db_error(asyncpg.exceptions.ProgramLimitExceededError("'card 4111'")), "too-large"),
        (OverflowError("date value out of range 'card 4111'"), "out-of-range"),
        (ValueError("Invalid isoformat string: 'card 4111'"), "invalid-data"),
        (PublishError("publish failed"), None),
    ],
)
def test_errors_no_retry_can_fix_dead_letter_at_once(
    error: BaseException, reason: str | None
) -> None:
    """Data the database or broker can never take is refused on the first attempt with its own
    reason, and the detail names the error's type, never the value it quoted."""
    if reason is None:
        error.__cause__ = MessageSizeTooLargeError("The message is 2000000 bytes")
        reason = "too-large"
    decision = decide(error, attempt=1, policy=POLICY)
    assert isinstance(decision, DeadLetter)
    assert decision.reason == reason
    assert "4111" not in decision.detail and "2000000" not in decision.detail
    assert cannot_succeed(error) == reason


def test_outages_are_not_mistaken_for_bad_data() -> None:
    """A data-class error on a connection the server cut is still an outage; an unreachable
    broker or database is never classed as unfixable."""
    lost = DBAPIError("save", {}, asyncpg.exceptions.DataError("x"),  # type: ignore[arg-type]
                      connection_invalidated=True)
    assert cannot_succeed(lost) is None
    assert decide(lost, attempt=1, policy=POLICY) == Retry(0.5, "infrastructure")
    for outage in (ConnectionRefusedError(), PublishError("no ack"),
                   OperationalError("select", {}, Exception("down"))):
        assert cannot_succeed(outage) is None


@pytest.mark.parametrize(
    "orig",
    [
        asyncpg.exceptions.ReadOnlySQLTransactionError("read-only transaction"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.TooManyConnectionsError("too many clients"),
        asyncpg.exceptions.ConnectionFailureError("connection failure"),
        asyncpg.exceptions.TargetServerAttributeNotMatched("no host accepts writes"),
    ],
)
def test_a_database_refusing_writes_for_now_is_an_outage(orig: BaseException) -> None:
    """A primary switched to read-only during a switchover (25006), shutting down or starting
    up (57P0x), out of connection slots (53300), a connection failure (class 08), or no host of
    a multi-host URL accepting writes: retried without limit, never dead-lettered, on a live
    connection as on a cut one."""
    error = _db_error(orig)
    assert decide(error, attempt=50, outages=49, policy=POLICY) == Retry(3.0, "infrastructure")
    assert cannot_succeed(error) is None


# -- outages, by every class and SQLSTATE the drivers raise ------------------------------------

_POSTGRES_ERRORS = sorted(
    {cls for cls in vars(asyncpg.exceptions).values()
     if isinstance(cls, type) and issubclass(cls, asyncpg.exceptions.PostgresError)
     and isinstance(getattr(cls, "sqlstate", None), str)},
    key=lambda cls: cls.__name__,
)
_OUTAGE_CLASSES = ("08", "40", "53", "58", "XX")
_OUTAGE_STATES = {"25006", "57P01", "57P02", "57P03", "57P04", "57P05"}
_WRAPPERS = [exc.DBAPIError, exc.OperationalError, exc.InterfaceError, exc.InternalError,
             exc.ProgrammingError, exc.DatabaseError, exc.DataError, exc.IntegrityError]


def _is_outage_state(state: str) -> bool:
    return state in _OUTAGE_STATES or state.startswith(_OUTAGE_CLASSES)


@settings(max_examples=300, deadline=None)
@given(
    cls=st.sampled_from(_POSTGRES_ERRORS),
    wrapper=st.sampled_from(_WRAPPERS),
    invalidated=st.booleans(),
    attempt=st.integers(min_value=1, max_value=1000),
    outages=st.integers(min_value=0, max_value=1000),
    message=st.text(max_size=80),
)
def test_every_server_error_is_an_outage_or_bounded_never_raised(
    cls: type[asyncpg.exceptions.PostgresError], wrapper: type[exc.DBAPIError],
    invalidated: bool, attempt: int, outages: int, message: str,
) -> None:
    """Every PostgreSQL error asyncpg can raise, in every SQLAlchemy wrapper, on a live or a
    cut connection: a connection or server failure (classes 08, 40, 53, 58, XX; read-only,
    shutting down, starting up), a cut connection or SQLAlchemy's operational and interface
    errors are retried as outages whatever the attempt count, data no retry fixes goes to the
    DLQ at once, anything else is bounded; the decision never raises."""
    error = wrapper("SAVE ...", {}, cls(message), connection_invalidated=invalidated)
    decision = decide(error, attempt=attempt, outages=outages, policy=POLICY)
    if invalidated or _is_outage_state(cls.sqlstate):
        assert decision == Retry(POLICY.delay(outages + 1), "infrastructure")
    elif cls.sqlstate.startswith(("22", "54")):
        assert isinstance(decision, DeadLetter)
    elif wrapper in (exc.OperationalError, exc.InterfaceError):  # SQLAlchemy's own outages
        assert decision == Retry(POLICY.delay(outages + 1), "infrastructure")
    elif attempt > POLICY.max_retries:
        assert isinstance(decision, DeadLetter) and decision.reason == "turn-failed"
    else:
        assert isinstance(decision, Retry) and decision.reason != "infrastructure"


@settings(max_examples=300, deadline=None)
@given(state=st.text(min_size=0, max_size=6), message=st.text(max_size=40),
       attempt=st.integers(min_value=1, max_value=50))
def test_an_arbitrary_sqlstate_is_decided_never_raised(
    state: str, message: str, attempt: int
) -> None:
    """Whatever SQLSTATE a server (or a pooler in front of it) reports, the decision is made
    without raising, and a connection-class state is an outage."""
    orig = asyncpg.exceptions.PostgresError(message)
    orig.sqlstate = state  # type: ignore[attr-defined]
    decision = decide(_db_error(orig), attempt=attempt, policy=POLICY)
    assert isinstance(decision, Retry | DeadLetter)
    if _is_outage_state(state):
        assert decision == Retry(POLICY.delay(1), "infrastructure")


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.exceptions.InterfaceError("cannot perform operation: connection is closed"),
        asyncpg.exceptions.InterfaceError("cannot perform operation: another operation is in "
                                          "progress"),
        asyncpg.exceptions.ProtocolError("unexpected message"),
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of "
                                                       "operation"),
        asyncpg.exceptions.OutdatedSchemaCacheError("cached statement plan is invalid"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError(),
        BrokenPipeError(),
    ],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("wrapper", [exc.InterfaceError, exc.InternalError, exc.DBAPIError])
def test_a_connection_closed_under_a_statement_is_an_outage(
    error: BaseException, wrapper: type[exc.DBAPIError]
) -> None:
    """The client-side ways a cut connection is reported (asyncpg's closed-connection and
    protocol errors, the operating system's resets and time-outs), in whatever SQLAlchemy
    wrapper, are outages and never count toward the retry budget."""
    decision = decide(wrapper("SAVE ...", {}, error), attempt=99, policy=POLICY)
    assert decision == Retry(POLICY.delay(1), "infrastructure")


def test_bad_arguments_the_client_refuses_are_not_outages() -> None:
    """asyncpg's subclasses of its InterfaceError name bad arguments or configuration, which no
    wait repairs: bounded like any other failure."""
    error = _db_error(asyncpg.exceptions.DataError("invalid input for query argument $1"))
    assert isinstance(decide(error, attempt=POLICY.max_retries + 1, policy=POLICY), DeadLetter)
