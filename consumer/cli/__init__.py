"""The ``turnflow`` command line: one subcommand per module, registered in ``COMMANDS``.

A command module provides ``add_arguments(parser)`` and ``run(args) -> int`` (the exit code).
Only the chosen command's module is imported, so ``turnflow migrate`` never loads aiokafka and a
broken optional command cannot break the others. Adding a command is one line here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """A subcommand: the module implementing it and its one-line help."""

    module: str
    help: str


COMMANDS: dict[str, Command] = {
    "consume": Command("consumer.cli.consume", "run the consumer service"),
    "relay": Command("consumer.cli.relay", "run the outbox relay alone"),
    "migrate": Command("consumer.cli.migrate", "migrate the database to the latest schema"),
    "topics": Command("consumer.cli.topics", "create the topics (idempotent)"),
    "schedule": Command("consumer.cli.schedule", "run the scheduler service"),
    "dev": Command(
        "consumer.devchat.dev", "embedded servers, consumer and scheduler, and a terminal chat"
    ),
    "broker": Command("consumer.cli.broker", "the embedded broker alone, for a local trial"),
    "bench": Command("consumer.cli.bench", "the end-to-end load benchmark (source tree)"),
    "prune": Command(
        "consumer.cli.prune",
        "drop model recordings, published outbox rows and dead letters past their retention",
    ),
    "erase": Command(
        "consumer.cli.erase", "remove one customer's conversation from every table that keeps it"
    ),
    "replay": Command(
        "consumer.cli.replay", "replay logged conversations against an agent, compare"
    ),
    "agents": Command(
        "consumer.cli.agents", "store agents as versioned data, activate, list; credits"
    ),
    "inspect": Command(
        "consumer.cli.inspect", "a conversation turn by turn, or the conversations list"
    ),
    "ui": Command("consumer.cli.ui", "the read-only web inspector of conversations"),
    "graph": Command("consumer.cli.graph", "an agent's flows as an SVG or Mermaid diagram"),
}


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``chosen``'s module is imported to add its options."""
    parser = argparse.ArgumentParser(
        prog="turnflow", description="turnflow: conversation turns from Kafka, saved in Postgres."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        if name == chosen:
            importlib.import_module(command.module).add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in arguments if not a.startswith("-")), None)
    args = build_parser(chosen if chosen in COMMANDS else None).parse_args(arguments)
    module = importlib.import_module(COMMANDS[args.command].module)
    try:
        code: int = module.run(args)
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        print(f"turnflow: bad setting: {settings_problems(exc)}", file=sys.stderr)
        return 2  # EXIT_CONFIG, as every command's other configuration errors
    return code


def settings_problems(error: ValidationError) -> str:
    """Each invalid setting as ``NAME: what is wrong``, by its environment variable name."""
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc']).upper() or 'SETTINGS'}: {e['msg']}"
        for e in error.errors(include_url=False, include_input=False)
    )
