"""One back-off for the model provider, shared by every conversation a consumer serves.

When the provider says it is over its rate limit (a 429, or a retryable answer with a
``Retry-After``/``retry-after-ms`` hint), every conversation would otherwise find out on its
own, each spending a turn slot and a request to hear the same answer, and each retrying on its
own clock. Instead the first such answer sets one back-off: until it ends, no turn of any
conversation takes a turn slot (turns wait loaded, holding nothing), and then the waiting turns
go through the fair queue (``consumer.turns.fairness``) in its order, so a flood's retries and the
other workspaces' first attempts share the slots by their weights. A later answer may lengthen
the back-off, never shorten it. The wait is the server's hint, else the first retry delay,
capped at ``RETRY_BACKOFF_MAX_MS``.

Every agent of a consumer shares its model provider (``AGENT``'s, or the registry's one from the
environment), so one back-off per consumer is one per provider. No I/O and no clock of its own:
the caller passes the event loop's time.
"""

from __future__ import annotations

from engine import ProviderError, UnusableReply

__all__ = ["SharedBackoff", "rate_limited"]


def rate_limited(error: BaseException | None) -> bool:
    """The provider said to slow down: a 429, or a retryable answer carrying a wait hint."""
    return (
        isinstance(error, ProviderError)
        and not isinstance(error, UnusableReply)
        and error.kind == "retryable"
        and (error.status == 429 or error.retry_after is not None)
    )


class SharedBackoff:
    """Until when the provider is left alone."""

    def __init__(self, *, first_delay_s: float, max_s: float) -> None:
        self._first_delay_s = first_delay_s
        self._max_s = max_s
        self._until = 0.0

    def note(self, error: BaseException | None, now: float) -> float | None:
        """Lengthen the back-off for ``error`` when it says the provider is rate-limiting;
        the back-off's seconds from ``now`` when it did, else None."""
        if not rate_limited(error):
            return None
        assert isinstance(error, ProviderError)
        hint = error.retry_after if error.retry_after is not None else self._first_delay_s
        until = now + min(max(hint, 0.0), self._max_s)
        if until <= self._until:
            return None
        self._until = until
        return until - now

    def remaining(self, now: float) -> float:
        """Seconds left of the back-off (0: none)."""
        return max(0.0, self._until - now)
