"""The Kafka services and what they share.

Each service has a package of its own:

- ``turns/``: the consume service, ``inbound.turns`` in, one engine turn per input, replies and
  timers out after the save;
- ``scheduler/``: the scheduler service, timers in and wakes out;
- ``relay/``: the outbox relay;
- ``hosting/``: many workspaces' agents: routing a record to its stored agent, plans, packs;
- ``inspect/``: the read side: ``turnflow inspect``, the web inspector and its test console;
- ``devchat/``: ``turnflow dev``, the embedded servers and the terminal chat;
- ``webserver/``: the bounded HTTP server of health and the inspector;
- ``cli/``: the ``turnflow`` command, one module per subcommand.

The modules at this level are only what every service process shares: ``settings``,
``metrics``, ``logs``, ``tracing``, ``health``, ``round_trips``, ``topics``, ``inputs`` (the
vocabulary of an inbound record), ``outbox`` and ``groups`` (the save-then-send path the consume
service and the scheduler both write through), ``dead_letters``, ``failures``, ``errors``,
``agents``, ``heap``, ``processes``, ``closing``, ``stopping``, ``partitioner``.

Imports go one way: the services use ``engine``, ``store``, ``hosting``, ``webserver`` and the
shared modules here; no shared module imports a service; only ``cli``, ``devchat`` and the
inspector's console, which run services, import a service.

The public API is below. Names are imported on first use (PEP 562), so ``turnflow migrate`` or
a look at ``consumer.settings`` does not load aiokafka, the engine and the store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from consumer.relay import OutboxRelay
    from consumer.settings import Settings
    from consumer.topics import TopicSpec, ensure_topics
    from consumer.turns.decisions import (
        Abandon,
        Commit,
        DeadLetter,
        Decision,
        Retry,
        RetryPolicy,
        decide,
    )
    from consumer.turns.parser import ParsedInput, Rejected, parse_record
    from consumer.turns.pipeline import OutboundTopics, TurnPipeline, TurnWork
    from consumer.turns.service import ConsumerService
    from consumer.turns.session_queues import SessionQueues
    from consumer.turns.watermarks import OffsetWatermarks

_EXPORTS = {
    "Abandon": "consumer.turns.decisions",
    "Commit": "consumer.turns.decisions",
    "DeadLetter": "consumer.turns.decisions",
    "Decision": "consumer.turns.decisions",
    "Retry": "consumer.turns.decisions",
    "RetryPolicy": "consumer.turns.decisions",
    "decide": "consumer.turns.decisions",
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
    "ParsedInput": "consumer.turns.parser",
    "Rejected": "consumer.turns.parser",
    "parse_record": "consumer.turns.parser",
    "OffsetWatermarks": "consumer.turns.watermarks",
    "SessionQueues": "consumer.turns.session_queues",
    "OutboundTopics": "consumer.turns.pipeline",
    "TurnPipeline": "consumer.turns.pipeline",
    "TurnWork": "consumer.turns.pipeline",
    "ConsumerService": "consumer.turns.service",
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
