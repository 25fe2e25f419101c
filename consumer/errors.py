"""Errors of the consumer package.

    ConsumerError                      base of everything raised here
    ├── EmbeddedBrokerError            the embedded Tansu broker could not start
    ├── TopicSetupError                topics could not be created or never became ready
    ├── AgentImportError               ``AGENT`` / ``--agent`` does not name an importable Agent
    ├── ServerUnreachableError         PostgreSQL or Kafka did not answer at startup
    ├── PortInUseError                 the metrics port is taken by another process
    ├── ProducerIdError                the broker does not hand out producer ids
    ├── DevError                       ``turnflow dev`` cannot start; the message is its one line
    ├── PublishError                   an outbox row was not acknowledged by the broker
    │   └── FencedPublishError         this replica lost the partition; it must not publish
    ├── ScheduleRecordError            an ``outbound.schedule`` record is not a valid entry
    └── TracingSettingsError           the OTEL_* variables ask for an exporter turnflow lacks

Context rides as keyword-only attributes (``session_id=``, ``topic=``), never as message text
taken from conversation content.
"""

from __future__ import annotations

__all__ = [
    "AgentImportError",
    "ConsumerError",
    "DevError",
    "EmbeddedBrokerError",
    "FencedPublishError",
    "PortInUseError",
    "ProducerIdError",
    "PublishError",
    "ScheduleRecordError",
    "ServerUnreachableError",
    "TopicSetupError",
    "TracingSettingsError",
]


class ConsumerError(Exception):
    """Base of the consumer's errors."""

    def __init__(
        self, message: str, *, session_id: str | None = None, topic: str | None = None
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.topic = topic


class EmbeddedBrokerError(ConsumerError):
    """The embedded broker binary is missing, died, or never answered."""


class TopicSetupError(ConsumerError):
    """Creating topics failed with something other than 'already exists'."""


class AgentImportError(ConsumerError):
    """The configured agent path cannot be imported or is not an agent."""


class ServerUnreachableError(ConsumerError):
    """A server the service needs did not answer at startup."""


class PortInUseError(ConsumerError):
    """The metrics port is already bound: nothing is unreachable, the address is taken."""


class ProducerIdError(ConsumerError):
    """The broker refused ``InitProducerId``: it cannot serve an idempotent producer."""


class DevError(ConsumerError):
    """``turnflow dev`` cannot start: a port, a variable, the agent or a server; one line."""


class PublishError(ConsumerError):
    """The broker did not acknowledge an outbox row."""


class FencedPublishError(PublishError):
    """The partition moved to another replica; publishing now could reorder replies."""


class ScheduleRecordError(ConsumerError):
    """A schedule record is malformed; the scheduler skips it (retrying cannot fix it).

    ``reason`` is a code for logs and metrics (``empty``, ``not-json``, ``not-an-object``,
    ``invalid-text``, ``invalid-field``); the message names the field, never its value.
    """

    def __init__(self, message: str, *, reason: str = "invalid-field") -> None:
        super().__init__(message)
        self.reason = reason


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (its type's name when it has none): what a one-line
    report of a failure shows."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class TracingSettingsError(ConsumerError):
    """``OTEL_TRACES_EXPORTER`` or the OTLP protocol names one this build cannot send with."""
