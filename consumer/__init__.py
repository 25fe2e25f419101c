"""The Kafka services: consumer, scheduler, outbox relay, CLI and metrics.

The public API is below. Names are imported on first use (PEP 562), so ``turnflow migrate`` or
a look at ``consumer.settings`` does not load aiokafka, the engine and the store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from consumer.decisions import (
        Abandon,
        Commit,
        DeadLetter,
        Decision,
        Retry,
        RetryPolicy,
        decide,
    )
    from consumer.embedded_broker import EmbeddedBroker
    from consumer.errors import (
        AgentImportError,
        ConsumerError,
        EmbeddedBrokerError,
        FencedPublishError,
        PublishError,
        ServerUnreachableError,
        TopicSetupError,
    )
    from consumer.outbox import OutboxPublisher, OutboxRelay
    from consumer.parser import ParsedInput, Rejected, parse_record
    from consumer.partitions import OffsetWatermarks, SessionQueues
    from consumer.pipeline import OutboundTopics, TurnPipeline, TurnWork
    from consumer.service import ConsumerService
    from consumer.settings import Settings
    from consumer.topics import TopicSpec, ensure_topics

_EXPORTS = {
    "Abandon": "consumer.decisions",
    "Commit": "consumer.decisions",
    "DeadLetter": "consumer.decisions",
    "Decision": "consumer.decisions",
    "Retry": "consumer.decisions",
    "RetryPolicy": "consumer.decisions",
    "decide": "consumer.decisions",
    "EmbeddedBroker": "consumer.embedded_broker",
    "AgentImportError": "consumer.errors",
    "ConsumerError": "consumer.errors",
    "EmbeddedBrokerError": "consumer.errors",
    "FencedPublishError": "consumer.errors",
    "PublishError": "consumer.errors",
    "ServerUnreachableError": "consumer.errors",
    "TopicSetupError": "consumer.errors",
    "OutboxPublisher": "consumer.outbox",
    "OutboxRelay": "consumer.outbox",
    "ParsedInput": "consumer.parser",
    "Rejected": "consumer.parser",
    "parse_record": "consumer.parser",
    "OffsetWatermarks": "consumer.partitions",
    "SessionQueues": "consumer.partitions",
    "OutboundTopics": "consumer.pipeline",
    "TurnPipeline": "consumer.pipeline",
    "TurnWork": "consumer.pipeline",
    "ConsumerService": "consumer.service",
    "Settings": "consumer.settings",
    "TopicSpec": "consumer.topics",
    "ensure_topics": "consumer.topics",
}

__all__ = [
    "Abandon",
    "AgentImportError",
    "Commit",
    "ConsumerError",
    "ConsumerService",
    "DeadLetter",
    "Decision",
    "EmbeddedBroker",
    "EmbeddedBrokerError",
    "FencedPublishError",
    "OffsetWatermarks",
    "OutboundTopics",
    "OutboxPublisher",
    "OutboxRelay",
    "ParsedInput",
    "PublishError",
    "Rejected",
    "Retry",
    "RetryPolicy",
    "ServerUnreachableError",
    "SessionQueues",
    "Settings",
    "TopicSetupError",
    "TopicSpec",
    "TurnPipeline",
    "TurnWork",
    "decide",
    "ensure_topics",
    "parse_record",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'consumer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
