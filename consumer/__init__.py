"""The Kafka services and what they share.

The modules at this level are the consume service (``service``: the input loop; ``pipeline``:
one input's load, turn, save and publish; ``partitions``, ``parser``, ``decisions``, ``groups``,
``supervisor``, ...) and the plumbing every service process shares (``settings``, ``metrics``,
``logs``, ``health``, ``topics``, ``outbox``, ``dead_letters``, ``failures``). Each other service
and product part has a package of its own:

- ``scheduler/``: the scheduler service, timers in and wakes out;
- ``relay/``: the outbox relay;
- ``hosting/``: many workspaces' agents: routing a record to its stored agent, plans, packs;
- ``inspect/``: the read side: ``turnflow inspect``, the web inspector and its test console;
- ``devchat/``: ``turnflow dev``, the embedded servers and the terminal chat;
- ``webserver/``: the bounded HTTP server of health and the inspector;
- ``cli/``: the ``turnflow`` command, one module per subcommand.

Imports go one way: the services use ``engine``, ``store``, ``hosting``, ``webserver`` and the
shared modules here; only ``cli``, ``devchat`` and the inspector's console, which run services,
import a service.

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
    from consumer.devchat.embedded_broker import EmbeddedBroker
    from consumer.errors import (
        AgentImportError,
        ConsumerError,
        EmbeddedBrokerError,
        FencedPublishError,
        PublishError,
        ServerUnreachableError,
        TopicSetupError,
    )
    from consumer.outbox import OutboxPublisher
    from consumer.parser import ParsedInput, Rejected, parse_record
    from consumer.partitions import OffsetWatermarks, SessionQueues
    from consumer.pipeline import OutboundTopics, TurnPipeline, TurnWork
    from consumer.relay import OutboxRelay
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
    "EmbeddedBroker": "consumer.devchat.embedded_broker",
    "AgentImportError": "consumer.errors",
    "ConsumerError": "consumer.errors",
    "EmbeddedBrokerError": "consumer.errors",
    "FencedPublishError": "consumer.errors",
    "PublishError": "consumer.errors",
    "ServerUnreachableError": "consumer.errors",
    "TopicSetupError": "consumer.errors",
    "OutboxPublisher": "consumer.outbox",
    "OutboxRelay": "consumer.relay",
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
