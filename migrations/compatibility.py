"""Which releases may run on a schema: the record an older `turnflow migrate` reads.

A revision that only expands the schema (new tables, new nullable columns, new indexes) leaves
every earlier release able to run on it. A revision that contracts it (drops or tightens a
column or table some release still reads, docs/decisions.md) declares at module level

    oldest_compatible_revision = "00NN"

naming the oldest revision whose code runs on the schema it produces. The oldest compatible
revision of a schema at revision R is the newest such declaration on the way from R down to
the first revision, or the first revision when none declares one.

Every online migration run (`migrations/env.py`) writes it, with R, to the one row of
`schema_compatibility` (created by revision 0019). An older release whose migrations do not
know R reads that row (`store.migrate.compatibility`): when its own head is at or after the
oldest compatible revision it may run on the schema as it is. Nothing here lists revisions:
revisions added later take part by declaring, or by not declaring, the attribute.
"""

from __future__ import annotations

from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

__all__ = ["TABLE", "oldest_compatible", "write"]

TABLE = "schema_compatibility"
_ATTRIBUTE = "oldest_compatible_revision"


def oldest_compatible(script: ScriptDirectory, revision: str) -> str:
    """The oldest revision whose code runs on the schema at `revision`."""
    first = revision
    for found in script.walk_revisions(base="base", head=revision):
        declared = getattr(found.module, _ATTRIBUTE, None)
        if declared:
            return str(declared)
        first = found.revision
    return first


def write(connection: Connection, script: ScriptDirectory) -> None:
    """Record the database's revision and its oldest compatible one (when the table exists)."""
    if connection.scalar(text(f"SELECT to_regclass('{TABLE}')")) is None:
        return
    current = connection.scalar(text("SELECT version_num FROM alembic_version"))
    if current is None:
        return
    connection.execute(
        text(
            f"INSERT INTO {TABLE} (singleton, revision, oldest_compatible) "
            "VALUES (true, :revision, :oldest) ON CONFLICT (singleton) DO UPDATE SET "
            "revision = excluded.revision, oldest_compatible = excluded.oldest_compatible, "
            "updated_at = now()"
        ),
        {"revision": current, "oldest": oldest_compatible(script, str(current))},
    )
