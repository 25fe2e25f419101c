"""The outbox relay service (``turnflow relay``): sends what a crash left in the outbox.

The consume service also runs one in its process; see ``consumer.relay.service``.
"""

from consumer.relay.service import PRUNE_EVERY_S, OutboxRelay

__all__ = ["PRUNE_EVERY_S", "OutboxRelay"]
