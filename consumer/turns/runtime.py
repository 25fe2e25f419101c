"""What every part of the consume service reads: its settings and the retry policy made of them,
the clients its turns run on, and the stop signal.

One object the parts share instead of each holding its own copy. The clients (``Clients``) exist
before any part does: ``turnflow consume`` opens them (``consumer.turns.clients.open_clients``)
and only then builds the parts around them, and a test gives its doubles the same way, through
``ConsumerService(..., clients=...)``. So no part ever finds a client missing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer

from consumer.dead_letters import DeadLetterPublisher
from consumer.settings import Settings
from consumer.stopping import stopped_within
from consumer.turns.decisions import RetryPolicy
from consumer.turns.pipeline import TurnPipeline
from consumer.turns.positions import SourcePositions
from store import Store
from store.model_budget import ModelBudget

__all__ = ["Clients", "Runtime"]


@dataclass
class Clients:
    """The clients the consume service's turns run on.

    ``budget`` is there only when a plan has a per-minute budget (``PLAN_TURNS_PER_MINUTE``);
    ``positions`` is where each partition stands in the database (``consumer.turns.positions``),
    which ``turnflow consume`` always keeps and a test of the loop alone may leave out."""

    consumer: AIOKafkaConsumer
    store: Store
    pipeline: TurnPipeline
    dead_letters: DeadLetterPublisher
    budget: ModelBudget | None = None
    positions: SourcePositions | None = None


class Runtime:
    """The service's settings, its clients and its stop signal."""

    def __init__(
        self, settings: Settings, clients: Clients, stopping: asyncio.Event | None = None
    ) -> None:
        self.settings = settings
        self.policy = RetryPolicy(
            max_retries=settings.max_retries,
            backoff_s=settings.retry_backoff_ms / 1000,
            backoff_max_s=settings.retry_backoff_max_ms / 1000,
            model_outage_s=settings.model_outage_max_ms / 1000,
            jitter=settings.retry_jitter,
        )
        self.stopping = stopping if stopping is not None else asyncio.Event()
        self.consumer = clients.consumer
        self.store = clients.store
        self.pipeline = clients.pipeline
        self.dead_letters = clients.dead_letters
        self.budget = clients.budget
        self.positions = clients.positions
        # The group consumer was stopped at shutdown: nothing more is committed through it.
        self.consumer_closed = False
        self.restart_wanted = False  # the database failed over under this process

    async def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; False when the service is stopping (the caller gives up)."""
        return not await stopped_within(self.stopping, seconds)
