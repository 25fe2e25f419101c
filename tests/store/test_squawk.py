"""squawk, the PostgreSQL migration linter, over every revision's SQL as `alembic upgrade
--sql` writes it (`migrations/sql.py`), with the project's `.squawk.toml`: a revision that would
block live turns (an index built without CONCURRENTLY, DDL with no lock_timeout) fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from migrations import sql
from store import migrate

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".squawk.toml"


@pytest.fixture(scope="module")
def squawk() -> str:
    found = shutil.which("squawk", path=str(Path(sys.executable).parent)) or shutil.which(
        "squawk"
    )
    if found is None:
        if os.environ.get("TURNFLOW_REQUIRE_SERVERS") == "1" or os.environ.get("CI"):
            pytest.fail("squawk is not installed; `make install` installs it (squawk-cli)")
        pytest.skip("squawk is not installed; `make install` installs it (squawk-cli)")
    return found


def _lint(squawk: str, paths: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [squawk, "-c", str(CONFIG), "--reporter", "gcc", *map(str, paths)],
        capture_output=True, text=True, timeout=60,
    )


def test_every_revision_passes_squawk(squawk: str, tmp_path: Path) -> None:
    """One SQL file per revision, from the first to head, and squawk finds nothing in any."""
    written = sql.write(tmp_path)
    assert len(written) == len(sql.revision_sql()) >= 19
    assert written[-1].name.startswith(f"{migrate.head()}_")
    result = _lint(squawk, written)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_squawk_refuses_the_blocking_forms(squawk: str, tmp_path: Path) -> None:
    """What the revisions used to do, with the same settings: an index built on `turns` inside
    the transaction, and a column added with no lock_timeout, are each reported."""
    blocking = tmp_path / "blocking.sql"
    blocking.write_text(
        "BEGIN;\n"
        "CREATE INDEX IF NOT EXISTS ix_turns_gated ON turns (session_id, created_at)"
        " WHERE outcomes @> '[{\"code\": \"gated\"}]';\n"
        "COMMIT;\n"
    )
    unguarded = tmp_path / "unguarded.sql"
    unguarded.write_text("BEGIN;\nALTER TABLE turns ADD COLUMN IF NOT EXISTS x TEXT;\nCOMMIT;\n")
    result = _lint(squawk, [blocking])
    assert result.returncode != 0 and "require-concurrent-index-creation" in result.stdout
    result = _lint(squawk, [unguarded])
    assert result.returncode != 0 and "require-lock-timeout" in result.stdout
