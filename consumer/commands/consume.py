"""``turnflow consume``: the consumer service (and its outbox relay) until SIGTERM."""

from __future__ import annotations

import argparse

from consumer.agents import load_agent
from consumer.commands.running import EXIT_CONFIG, fail, run_service
from consumer.errors import AgentImportError
from consumer.logs import configure_logging
from consumer.service import ConsumerService
from consumer.settings import Settings

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", help="module:attribute of the agent (default: $AGENT)")
    parser.add_argument(
        "--no-relay", action="store_true", help="do not run the outbox relay in this process"
    )


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    configure_logging(settings.log_level)
    agent_path = args.agent or settings.agent
    if not agent_path:
        return fail("no agent: pass --agent module:attribute or set AGENT", EXIT_CONFIG)
    if not settings.kafka_bootstrap_servers:
        return fail("KAFKA_BOOTSTRAP_SERVERS is not set", EXIT_CONFIG)
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    try:
        agent = load_agent(agent_path)
    except AgentImportError as exc:
        return fail(str(exc), EXIT_CONFIG)
    service = ConsumerService(settings, agent, run_relay=not args.no_relay)
    return run_service(service.run, service.stop)
