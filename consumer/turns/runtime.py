"""What every part of the consume service reads: its settings and the retry policy made of them,
the clients it opens when it starts (the broker clients, the store, the pipeline, the DLQ
publisher, the per-minute budget), and the stop signal.

One object the parts share instead of each holding its own copy: the clients exist only once
``lifecycle.open_runtime`` has run (tests put doubles in their place), so a part looks a client up
here when it uses it, never at construction, and every part sees the same one.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer.dead_letters import DeadLetterPublisher
from consumer.health import HealthServer
from consumer.outbox import OutboxPublisher
from consumer.relay import OutboxRelay
from consumer.round_trips import RoundTrips
from consumer.settings import Settings
from consumer.stopping import stopped_within
from consumer.turns.decisions import RetryPolicy
from consumer.turns.pipeline import TurnPipeline
from consumer.turns.positions import SourcePositions
from store import Store
from store.model_budget import ModelBudget

__all__ = ["Runtime"]


class Runtime:
    """The service's settings, its clients (``None`` until started, or after closing) and its
    stop signal."""

    def __init__(self, settings: Settings, store: Store | None) -> None:
        self.settings = settings
        self.policy = RetryPolicy(
            max_retries=settings.max_retries,
            backoff_s=settings.retry_backoff_ms / 1000,
            backoff_max_s=settings.retry_backoff_max_ms / 1000,
            model_outage_s=settings.model_outage_max_ms / 1000,
            jitter=settings.retry_jitter,
        )
        self.stopping = asyncio.Event()
        self.store = store
        # A store given by the caller is the caller's to close.
        self.owns_store = store is None
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self.pipeline: TurnPipeline | None = None
        self.publisher: OutboxPublisher | None = None
        self.dead_letters: DeadLetterPublisher | None = None
        self.budget: ModelBudget | None = None
        self.relay: OutboxRelay | None = None
        self.relay_task: asyncio.Task[None] | None = None
        self.health: HealthServer | None = None
        self.round_trips: RoundTrips | None = None
        # Where each partition stands in the database (``consumer.turns.positions``).
        self.positions: SourcePositions | None = None
        self.restart_wanted = False  # the database failed over under this process

    async def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; False when the service is stopping (the caller gives up)."""
        return not await stopped_within(self.stopping, seconds)
