"""What to do with an input after an attempt: commit, retry (that session only), DLQ, or abandon.

The one place where failures are classified, so the rules read in one screen:

- success → ``Commit`` (the offset becomes eligible once everything below it is done);
- the partition moved to another replica (``FencedPublishError``) → ``Abandon``: do not publish,
  do not commit; the new owner replays the record and the relay publishes what was saved;
- a record no agent may answer (``RouteRefused``: an unknown agent, one of another workspace
  than the conversation's) → ``DeadLetter`` at once, with its reason;
- a request the engine refuses (``TurnRequestError``), a fatal model failure, or data no retry
  can fix (``consumer.failures``: text the database cannot store, a value out of range, a
  record over a size limit) → ``DeadLetter`` at once, with its own reason: retrying cannot help;
- a retryable model failure (the model could not be reached: a timeout, a refused connection,
  a 429 or 5xx) → ``Retry`` with exponential backoff and jitter (the server's ``retry_after``
  when larger, up to the backoff's ceiling: a server asking for a day must not hold the
  session, and the partition's committed offset behind it, for a day) for as long as an outage
  plausibly lasts (``model_outage_s`` since the input's first such failure), then ``Fallback``:
  the message is answered with the agent's fallback message, never dead-lettered, since a
  working model would have answered it. An input that is not a message has nothing to answer
  and goes to the DLQ (``retries-exhausted``) instead;
- a reply the model gave but nothing in it could be used (``UnusableReply``, raised by the idle
  speaker) → ``Retry`` up to ``max_retries``, then ``Fallback``: a model at temperature 0 gives
  the same reply every time, so waiting out an outage's bound would only hold the conversation;
- a spent tool budget with nothing to say (``BudgetSpent``) → ``Fallback`` at once: running
  the message again would run its tools again;
- a version race lost too often, or an unexpected exception → ``Retry`` with exponential
  backoff, then ``DeadLetter`` past ``max_retries``;
- infrastructure (PostgreSQL or Kafka unreachable, a database connection lost mid-statement,
  or a database that refuses writes for now: read-only during a switchover, shutting down or
  starting up, ``consumer.failures.database_unavailable``) → ``Retry`` with capped backoff and
  no limit: an outage must not dead-letter customers' inputs, and the held offset makes the
  lag visible. Outages do not count as attempts: ``attempt`` numbers only the attempts that
  failed otherwise, so a few cut connections in a row never use up ``max_retries`` for an
  input whose turn would have succeeded, and ``outages`` (how many came before this one)
  paces the outage back-off.

Pure: no I/O, no clock, no randomness; the attempt number, the time already waited on the model
and a random draw for the jitter come in, the delay goes out.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.errors import KafkaError
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from consumer.errors import FencedPublishError, PublishError
from consumer.failures import cannot_succeed, database_unavailable, describe
from consumer.hosting.routing import RouteRefused
from engine import BudgetSpent, ProviderError, TurnRequestError, UnusableReply

__all__ = [
    "INFRASTRUCTURE",
    "Abandon",
    "Commit",
    "DeadLetter",
    "Decision",
    "Fallback",
    "Retry",
    "RetryPolicy",
    "VersionConflictsExhausted",
    "decide",
]


class VersionConflictsExhausted(Exception):
    """A turn lost the optimistic version race more times than the policy allows."""

    def __init__(self, *, session_id: str, attempts: int) -> None:
        super().__init__(f"version conflicts after {attempts} attempts")
        self.session_id = session_id
        self.attempts = attempts


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of retrying one input; delays in seconds."""

    max_retries: int = 5
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    model_outage_s: float = 600.0
    jitter: float = 0.5

    def delay(self, attempt: int, draw: float = 1.0) -> float:
        """Delay before retry number ``attempt`` (1-based): doubling, capped; ``draw`` (in
        [0, 1]) takes up to ``jitter`` of it away, so conversations that failed together
        (every one in flight when the model went down) do not all come back at once."""
        full = float(min(self.backoff_max_s, self.backoff_s * (2 ** max(0, attempt - 1))))
        return full * (1.0 - self.jitter * (1.0 - min(1.0, max(0.0, draw))))


@dataclass(frozen=True)
class Commit:
    """The input is done; its offset may be committed."""


@dataclass(frozen=True)
class Retry:
    """Run the input again after ``delay_s``; other sessions go on meanwhile."""

    delay_s: float
    reason: str


@dataclass(frozen=True)
class DeadLetter:
    """Send the original record to the DLQ with ``reason`` (a code) and ``detail``."""

    reason: str
    detail: str


@dataclass(frozen=True)
class Fallback:
    """Answer the message with the agent's fallback message: the model could not answer it
    (``reason``: ``model-unavailable``, ``unusable-reply`` or ``budget-spent``)."""

    reason: str


@dataclass(frozen=True)
class Abandon:
    """Stop without publishing or committing; another consumer owns the record now."""

    reason: str


Decision = Commit | Retry | DeadLetter | Fallback | Abandon

# The reason of a ``Retry`` for an outage: the one retry that is not counted as an attempt.
INFRASTRUCTURE = "infrastructure"

_INFRASTRUCTURE: tuple[type[BaseException], ...] = (
    OSError,  # includes TimeoutError and ConnectionError
    KafkaError,
    PublishError,
    OperationalError,
    InterfaceError,
    DisconnectionError,
    PoolTimeoutError,
)


def decide(
    error: BaseException | None,
    *,
    attempt: int,
    policy: RetryPolicy,
    waited_s: float = 0.0,
    draw: float = 1.0,
    answerable: bool = True,
    outages: int = 0,
) -> Decision:
    """The decision after attempt number ``attempt`` (1-based, outages not counted) ended with
    ``error`` (or not).

    ``waited_s``: how long the input has been waiting on the model, since its first retryable
    provider failure; ``draw``: a random number in [0, 1] for the jitter; ``answerable``: the
    input is a message, which a fallback can answer; ``outages``: how many of the input's
    attempts before this one ended in an outage (``INFRASTRUCTURE``)."""
    if error is None:
        return Commit()
    if isinstance(error, FencedPublishError):
        return Abandon("partition-lost")
    if isinstance(error, TurnRequestError):
        return DeadLetter("invalid-request", _first_line(error))
    if isinstance(error, RouteRefused):
        return DeadLetter(error.reason, _first_line(error))
    if isinstance(error, ProviderError):
        if error.kind == "fatal":
            status = f" (status {error.status})" if error.status is not None else ""
            return DeadLetter("provider-fatal", f"model provider refused{status}")
        if isinstance(error, BudgetSpent):  # a retry would run the message's tools again
            return _give_up("budget-spent", "the tool budget ran out with nothing to say",
                            answerable)
        if isinstance(error, UnusableReply):
            if attempt > policy.max_retries:
                return _give_up("unusable-reply", f"unusable replies after {attempt} attempts",
                                answerable)
            return Retry(policy.delay(attempt, draw), "unusable-reply")
        delay = max(policy.delay(attempt, draw),
                    min(error.retry_after or 0.0, policy.backoff_max_s))
        if waited_s + delay > policy.model_outage_s:
            return _give_up("model-unavailable", f"model unavailable for {waited_s:.0f}s "
                            f"({attempt} attempts)", answerable)
        return Retry(delay, "provider-retryable")
    if isinstance(error, VersionConflictsExhausted):
        return _bounded_retry("version-conflicts", attempt, policy)
    if _connection_lost(error) or database_unavailable(error):
        return Retry(policy.delay(outages + 1, draw), INFRASTRUCTURE)
    unfixable = cannot_succeed(error)
    if unfixable is not None:
        return DeadLetter(unfixable, describe(error))
    if isinstance(error, _INFRASTRUCTURE):
        return Retry(policy.delay(outages + 1, draw), INFRASTRUCTURE)
    return _bounded_retry("turn-failed", attempt, policy)


def _connection_lost(error: BaseException) -> bool:
    """A database error raised because the connection broke under the statement (a server
    restart, ``pg_terminate_backend``, a network cut). asyncpg reports these under several
    generic classes, but SQLAlchemy flags every one ``connection_invalidated``."""
    return isinstance(error, DBAPIError) and error.connection_invalidated


def _give_up(reason: str, detail: str, answerable: bool) -> Fallback | DeadLetter:
    return Fallback(reason) if answerable else DeadLetter("retries-exhausted", detail)


def _bounded_retry(reason: str, attempt: int, policy: RetryPolicy) -> Retry | DeadLetter:
    if attempt > policy.max_retries:
        return DeadLetter(reason, f"{reason} after {attempt} attempts")
    return Retry(policy.delay(attempt), reason)


def _first_line(error: BaseException) -> str:
    """The error's first line, bounded: engine messages name fields, never message text."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:300]
