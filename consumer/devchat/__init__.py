"""The developer's chat (``turnflow dev``, ``make run``): embedded PostgreSQL and broker, the
consume service, the scheduler and the relay in one process, and a terminal chat with the agent.

``dev`` is the command; ``servers`` starts the embedded servers and the services; ``client``
sends a customer's lines through the topics and reads the replies; ``terminal`` and ``lines``
are the terminal chat; ``embedded_broker`` runs the embedded Kafka-compatible broker. Like the
CLI, this package composes the services, so it is the one place besides ``consumer.cli`` that
imports them.
"""
