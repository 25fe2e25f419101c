"""Running ``turnflow dev`` as a newcomer does: a child process, a script, the exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def run_dev(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO, timeout: float = 240
) -> DevRun:
    """``turnflow dev ARGS`` with the test's environment on top of a clean one."""
    base = {k: v for k, v in os.environ.items() if k not in _MODEL_ENV}
    base.pop("DATABASE_URL", None)
    base.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    completed = subprocess.run(
        [sys.executable, "-m", "consumer.cli", "dev", *args],
        cwd=cwd,
        env={**base, "METRICS_PORT": "0", **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return DevRun(completed.returncode, completed.stdout, completed.stderr)
