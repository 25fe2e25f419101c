"""Running a long-lived service until SIGTERM or SIGINT, with one-line failures.

Every long-running command logs one line when ready (the service does), turns SIGTERM and
SIGINT into a clean stop (exit 0), and turns an unreachable server, a database error or a bad
agent into one line on stderr and a non-zero exit — never a traceback. A database error's line
names its cause and its exit code says which (consumer/cli/database_failures.py).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable

import asyncpg
from aiokafka.errors import KafkaConnectionError, KafkaError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from consumer.cli.database_failures import describe
from consumer.errors import AgentImportError, ConsumerError

__all__ = ["EXIT_CONFIG", "EXIT_UNREACHABLE", "fail", "run_service"]

EXIT_UNREACHABLE = 1
EXIT_CONFIG = 2


def fail(message: str, code: int) -> int:
    """Print a one-line reason to stderr and return the exit code."""
    print(f"turnflow: {message}", file=sys.stderr)
    return code


def run_service(
    run: Callable[[], Awaitable[int | None]], stop: Callable[[], None]
) -> int:
    """Run ``run()`` until it returns; SIGTERM/SIGINT call ``stop()``. Returns the exit code:
    the one ``run()`` returned (a supervisor's), else 0."""

    async def main() -> int | None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop)
        return await run()

    try:
        code = asyncio.run(main())
    except AgentImportError as exc:
        return fail(str(exc), EXIT_CONFIG)
    except (KafkaConnectionError, OSError) as exc:
        return fail(f"a server is unreachable: {_describe(exc)}", EXIT_UNREACHABLE)
    except (OperationalError, InterfaceError, DBAPIError, asyncpg.PostgresError) as exc:
        failure = describe(exc)
        return fail(failure.line, failure.exit_code)
    except KafkaError as exc:
        return fail(f"Kafka failed: {type(exc).__name__}", EXIT_UNREACHABLE)
    except ConsumerError as exc:
        return fail(str(exc), EXIT_UNREACHABLE)
    return code if isinstance(code, int) else 0


def _describe(exc: BaseException) -> str:
    """``Type: message`` without repeating the type when the message already starts with it."""
    name, text = type(exc).__name__, str(exc)
    return text if text.startswith(name) else f"{name}: {text}"
