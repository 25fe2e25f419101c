"""The Kafka services: consumer, scheduler, outbox relay, CLI and metrics."""
