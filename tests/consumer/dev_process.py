"""Running ``turnflow dev`` as a newcomer does: a child process, a script, the exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.broker import unique_topic_name

REPO = Path(__file__).resolve().parents[2]

# A developer's model keys must not turn the offline tests into paid, flaky ones.
_MODEL_ENV = ("OPENAI_API_KEY", "TURNFLOW_MODEL_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY",
              "TURNFLOW_MODEL")


@dataclass(frozen=True)
class DevRun:
    code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def clean_env() -> dict[str, str]:
    """This process's environment without model keys or server addresses."""
    drop = {*_MODEL_ENV, "DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # The checkout under test, even when the child runs elsewhere (an agent in a temp dir).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run_dev(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO, timeout: float = 240
) -> DevRun:
    """``turnflow dev ARGS`` with the test's environment on top of a clean one."""
    completed = subprocess.run(
        [sys.executable, "-m", "consumer.cli", "dev", *args],
        cwd=cwd,
        env={**clean_env(), "METRICS_PORT": "0", **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return DevRun(completed.returncode, completed.stdout, completed.stderr)


def server_env(database_url: str, kafka_bootstrap: str, scope: str) -> dict[str, str]:
    """The servers under test, with topics and group unique to ``scope``."""
    return {
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        # The test broker may be the embedded one, which has no producer ids.
        "KAFKA_IDEMPOTENT_PRODUCER": "false",
        "INBOUND_TOPIC": unique_topic_name("inbound.turns", scope),
        "MESSAGES_TOPIC": unique_topic_name("outbound.messages", scope),
        "SCHEDULE_TOPIC": unique_topic_name("outbound.schedule", scope),
        "DLQ_TOPIC": unique_topic_name("inbound.turns.dlq", scope),
        "GROUP_ID": unique_topic_name("dev", scope),
        "TURNFLOW_DEMO_SILENCE_MS": "4000",  # well above the 1.5 s pause before an input
    }
