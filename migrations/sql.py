"""Each revision's SQL as `alembic upgrade --sql` writes it, one text per revision: what the
squawk lint reads (`python -m migrations.sql DIR` writes them as DIR/<revision>.sql).

Offline, nothing is read from a database: the online-only steps of `migrations/online.py` (the
INVALID index check) are left out, and `with_lock_retries` shows its `SET LOCAL lock_timeout`
once, without the retries. No connection is made; the URL only picks the dialect.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

__all__ = ["revision_sql", "write"]

_DIR = Path(__file__).resolve().parent
_DIALECT_ONLY = "postgresql://offline@localhost/offline"


def revision_sql() -> dict[str, str]:
    """{revision: the SQL its upgrade runs}, oldest first."""
    script = ScriptDirectory(str(_DIR))
    found: dict[str, str] = {}
    for revision in reversed(list(script.walk_revisions())):
        buffer = io.StringIO()
        config = Config(str(_DIR / "alembic.ini"), output_buffer=buffer)
        config.set_main_option("script_location", str(_DIR))
        config.attributes["url"] = _DIALECT_ONLY
        down = revision.down_revision
        start = "base" if down is None else str(down)
        command.upgrade(config, f"{start}:{revision.revision}", sql=True)
        found[revision.revision] = buffer.getvalue()
    return found


def write(directory: Path) -> list[Path]:
    """Write each revision's SQL to `directory/<revision>_<module>.sql`."""
    directory.mkdir(parents=True, exist_ok=True)
    script = ScriptDirectory(str(_DIR))
    written = []
    for revision, sql in revision_sql().items():
        module = Path(script.get_revision(revision).path).stem  # type: ignore[union-attr]
        path = directory / f"{module}.sql"
        path.write_text(sql)
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m migrations.sql DIRECTORY")
    for path in write(Path(sys.argv[1])):
        print(path)
