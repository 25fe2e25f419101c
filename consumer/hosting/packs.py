"""Loading the code packs (``PACKS``: comma-separated ``module:attribute``) that agents stored
as data name: their actions, conditions, tool handlers and backends (``engine.packs``).

Each entry is imported like ``AGENT`` is (the current folder importable first) and must be an
``engine.packs.Pack``, or a zero-argument callable returning one. Failures raise
``AgentImportError`` with a one-line reason the CLI prints.
"""

from __future__ import annotations

from consumer.agents import import_attribute
from consumer.errors import AgentImportError
from engine.packs import Pack, PackError, PackSet

__all__ = ["load_packs"]


def load_packs(spec: str | None) -> PackSet:
    """The packs ``spec`` names (None or empty: none)."""
    packs = PackSet()
    for entry in (part.strip() for part in (spec or "").split(",")):
        if not entry:
            continue
        pack = _load_one(entry)
        try:
            packs.add(pack)
        except PackError as exc:
            raise AgentImportError(f"pack {entry!r}: {exc}") from None
    return packs


def _load_one(path: str) -> Pack:
    target = import_attribute(path, "a pack")
    if not isinstance(target, Pack) and callable(target):
        try:
            target = target()
        except Exception as exc:
            raise AgentImportError(
                f"building the pack {path!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(target, Pack):
        raise AgentImportError(f"{path!r} is not an engine.packs.Pack")
    return target
