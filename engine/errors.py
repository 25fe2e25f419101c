"""Every error the engine raises, in one tree.

    TurnflowError
    ├── FlowConfigurationError   bad agent configuration, raised by ``Agent(...)``
    ├── TurnRequestError         a turn request that is not one valid input (raised before phase 1)
    ├── ProviderError            the model provider failed; ``kind`` is "retryable" or "fatal"
    │   └── UnusableReply        the call came back, but its reply cannot be used
    └── MockExhausted            a ``MockProvider`` was called past the end of its script

Context travels as keyword-only attributes (``flow_id=``, ``step_id=``, ``session_id=``) so that
hosts can log or route on them without parsing messages.
"""

from __future__ import annotations

from typing import Literal

ProviderErrorKind = Literal["retryable", "fatal"]


class TurnflowError(Exception):
    """Base of every error raised by the engine."""


class FlowConfigurationError(TurnflowError):
    """The agent's configuration is invalid; raised at construction, never during a turn.

    The message starts with where the problem is: the flow (by id, or by its position in
    ``flows`` when it has none), the step (likewise), the field, and for other settings their
    name (``where``), so an author never has to guess which of forty steps is meant.
    """

    def __init__(
        self,
        message: str,
        *,
        flow_id: str | None = None,
        step_id: str | None = None,
        field: str | None = None,
        flow_index: int | None = None,
        step_index: int | None = None,
        where: str | None = None,
    ) -> None:
        parts = []
        if flow_id is not None:
            parts.append(f"flow {flow_id!r}")
        elif flow_index is not None:
            parts.append(f"flows[{flow_index}] (no id)")
        if step_id is not None:
            parts.append(f"step {step_id!r}")
        elif step_index is not None:
            parts.append(f"steps[{step_index}] (no id)")
        if where is not None:
            parts.append(where)
        if field is not None:
            parts.append(f"field {field!r}")
        super().__init__(f"{', '.join(parts)}: {message}" if parts else message)
        self.flow_id = flow_id
        self.step_id = step_id
        self.field = field
        self.flow_index = flow_index
        self.step_index = step_index


class TurnRequestError(TurnflowError):
    """The turn request is not exactly one valid input kind."""

    def __init__(self, message: str, *, session_id: str | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id


MAX_RETRY_AFTER_S = 86_400.0
"""The longest wait a server's hint (``Retry-After``, or a provider's own ``retry_after``) is
taken at: a day. A turn adds it to the current time, and ``1e12`` seconds would overflow the
date; longer hints are capped here, where every reader of the hint gets it."""


class ProviderError(TurnflowError):
    """The model provider failed.

    ``retryable``: the failure may pass with time (429, 5xx, timeouts, connection errors);
    ``retry_after`` carries the server's hint in seconds when it gave one (at most
    ``MAX_RETRY_AFTER_S``; a negative or NaN hint is no hint).
    ``fatal``: waiting will not help (401, 403, context length, other 400s).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ProviderErrorKind = "retryable",
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ProviderErrorKind = kind
        self.status = status
        self.retry_after = (
            min(retry_after, MAX_RETRY_AFTER_S)
            if retry_after is not None and retry_after >= 0
            else None
        )

    def __repr__(self) -> str:
        return f"ProviderError({str(self)!r}, kind={self.kind!r}, status={self.status!r})"


class UnusableReply(ProviderError):
    """The call was answered, but the reply cannot be used: cut off at the token cap, not the
    JSON object asked for. Always ``retryable`` (a model at a temperature may answer better next
    time), but not an outage: the understand phase reads it as an empty judgement (the call
    still counts) instead of raising, and a host that retries it anyway bounds the retries by
    count, since a model at temperature 0 gives the same reply to the same prompt."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="retryable")

    def __repr__(self) -> str:
        return f"UnusableReply({str(self)!r})"


class BudgetSpent(UnusableReply):
    """The model kept calling tools past the turn's tool budget (``max_tool_calls``, plus the
    goal headroom) and gave no text even when offered no tools, and the agent has no
    ``fallback_message``. A spent budget is not a model failure: running the message again
    would run its tools again, so a host answers it at once with its own fallback message,
    without a retry. A subclass of ``UnusableReply``, so a host that knows only that one still
    bounds its retries."""

    def __repr__(self) -> str:
        return f"BudgetSpent({str(self)!r})"


class MockExhausted(TurnflowError):
    """A ``MockProvider`` was asked for one call more than its script holds."""
