"""The commit / retry / DLQ / abandon decision."""

from __future__ import annotations

import asyncpg
import pytest
from aiokafka.errors import MessageSizeTooLargeError
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
    """Database or broker outages retry forever with capped backoff instead of dead-lettering."""
    decision = decide(error, attempt=50, policy=POLICY)
    assert decision == Retry(3.0, "infrastructure")


def test_connection_lost_mid_statement_is_an_outage() -> None:
    """A database error raised on a connection the server cut (SQLAlchemy flags it
    ``connection_invalidated``) retries without limit; the same class on a live connection is
    bounded like any other failure."""
    lost = DBAPIError("save", {}, Exception("terminating connection"),
                      connection_invalidated=True)
    assert decide(lost, attempt=50, policy=POLICY) == Retry(3.0, "infrastructure")
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
    assert decide(error, attempt=50, policy=POLICY) == Retry(3.0, "infrastructure")
    assert cannot_succeed(error) is None
