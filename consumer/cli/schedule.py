"""``turnflow schedule``: the scheduler service (timers in, wakes out) until SIGTERM."""

from __future__ import annotations

import argparse
import math

from consumer import heap, tracing
from consumer.cli.running import EXIT_CONFIG, fail, run_service
from consumer.logs import configure_logging
from consumer.scheduler.service import FiringOptions, SchedulerService
from consumer.settings import Settings

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = FiringOptions()
    parser.add_argument(
        "--batch-size", type=int, default=defaults.batch_size,
        help=f"timers claimed per transaction (default: {defaults.batch_size})",
    )
    parser.add_argument(
        "--max-idle", type=float, default=defaults.max_idle,
        help="longest sleep in seconds before looking at the table again "
        f"(default: {defaults.max_idle:g})",
    )


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    configure_logging(settings.log_level)
    if not settings.kafka_bootstrap_servers:
        return fail("KAFKA_BOOTSTRAP_SERVERS is not set", EXIT_CONFIG)
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    # ``nan <= 0`` is false, so the finite check is what refuses ``--max-idle nan`` (and inf).
    if args.batch_size < 1 or not (math.isfinite(args.max_idle) and args.max_idle > 0):
        return fail("--batch-size and --max-idle must be positive (--max-idle finite)",
                    EXIT_CONFIG)
    if (tracing_problem := tracing.start()) is not None:
        return fail(tracing_problem, EXIT_CONFIG)
    options = FiringOptions(batch_size=args.batch_size, max_idle=args.max_idle)
    service = SchedulerService(settings, options=options)
    heap.settle()
    return run_service(service.run, service.stop)
