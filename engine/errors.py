"""Every error the engine raises, in one tree.

    TurnflowError
    ├── FlowConfigurationError   bad agent configuration, raised by ``Agent(...)``
    ├── TurnRequestError         a turn request that is not one valid input (raised before phase 1)
    ├── ProviderError            the model provider failed; ``kind`` is "retryable" or "fatal"
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
    """The agent's configuration is invalid; raised at construction, never during a turn."""

    def __init__(
        self, message: str, *, flow_id: str | None = None, step_id: str | None = None
    ) -> None:
        where = []
        if flow_id is not None:
            where.append(f"flow {flow_id!r}")
        if step_id is not None:
            where.append(f"step {step_id!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.flow_id = flow_id
        self.step_id = step_id


class TurnRequestError(TurnflowError):
    """The turn request is not exactly one valid input kind."""

    def __init__(self, message: str, *, session_id: str | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id


class ProviderError(TurnflowError):
    """The model provider failed.

    ``retryable``: the failure may pass with time (429, 5xx, timeouts, connection errors);
    ``retry_after`` carries the server's hint in seconds when it gave one.
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
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"ProviderError({str(self)!r}, kind={self.kind!r}, status={self.status!r})"


class MockExhausted(TurnflowError):
    """A ``MockProvider`` was asked for one call more than its script holds."""
