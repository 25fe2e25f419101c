"""Reading PostgreSQL's executed plans in tests: which rows a statement really read.

A statement whose cost must not grow with a table is checked by seeding that table and counting
the rows the executed plan's scans of it produced or filtered out, under the plan built for the
values given and under the generic plan a prepared statement settles on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import asyncpg

from store.direct import Positional


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The plan node and every node below it."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def table_of(relation: str | None) -> str | None:
    """The table a scanned relation belongs to: the turn log's partitions (``turns_p…``,
    store/partitions.py) are ``turns``."""
    if relation is not None and relation.startswith("turns_p"):
        return "turns"
    return relation


def rows_read(plan: dict[str, Any], tables: set[str]) -> int:
    """Rows the plan's scans of ``tables`` (or of their partitions) produced or filtered out,
    over all their loops."""
    total = 0
    for node in nodes(plan):
        if table_of(node.get("Relation Name")) in tables and node["Node Type"] != "ModifyTable":
            per_loop = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            per_loop += node.get("Rows Removed by Index Recheck", 0)
            total += per_loop * node.get("Actual Loops", 1)
    return total


class _RolledBack(Exception):
    def __init__(self, plan: Any) -> None:
        self.plan = plan


async def explain(
    url: str, statement: Positional, parameters: Mapping[str, Any], *, generic: bool
) -> Any:
    """The executed plan of ``statement`` (``EXPLAIN ANALYZE``), whatever it wrote rolled back."""
    connection = await asyncpg.connect(url)
    try:
        if generic:
            await connection.execute("SET plan_cache_mode = force_generic_plan")
        async with connection.transaction():
            rows = await connection.fetch(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + statement.sql,
                *(parameters[n] for n in statement.names),
            )
            raise _RolledBack(json.loads(rows[0][0])[0]["Plan"])
    except _RolledBack as done:
        return done.plan
    finally:
        await connection.close()
