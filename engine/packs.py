"""Packs: the code an agent definition names, registered under names.

An agent stored as data (``engine.definition``) holds everything that is data; what must stay
code (``do`` actions, registered conditions, tool handlers, web search and knowledge backends)
comes from packs. A pack is plain Python the deployment installs; a definition lists the packs
it uses and names their pieces by name. A name no listed pack provides is refused when the
definition is built (so when it is stored), never on the turn that first reaches it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.config import Action

__all__ = ["Pack", "PackError", "PackSet"]


class PackError(ValueError):
    """A definition names a pack, or a piece of one, that the deployment does not have."""


@dataclass(frozen=True)
class Pack:
    """Named code for agents defined as data.

    ``actions``: ``do`` handlers (a callable or an ``engine.Action`` with its params);
    ``conditions``: ``fn(ctx, arg)``; ``tools``: tool handlers; ``web_search``: objects with
    ``async search(query, *, limit, allowed_domains)``; ``knowledge``: knowledge indexes
    (anything ``Lifecycle.knowledge_index`` takes); ``workspace_knowledge``: see below."""

    name: str
    actions: Mapping[str, Action | Callable[..., Any]] = field(default_factory=dict)
    conditions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    tools: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    web_search: Mapping[str, Any] = field(default_factory=dict)
    knowledge: Mapping[str, Any] = field(default_factory=dict)
    events: Mapping[str, Any] = field(default_factory=dict)
    # The deployment's way to each workspace's whole Knowledge Base: ``fn(workspace_id)`` gives
    # its ``WorkspaceKnowledgeIndex`` (an agent with no knowledge sources of its own searches
    # it). Deployment-wide: at most one installed pack has it, whatever a definition lists.
    workspace_knowledge: Callable[[str], Any] | None = None


_KINDS = ("actions", "conditions", "tools", "web_search", "knowledge", "events")


class PackSet:
    """The packs a deployment has, by name; ``select`` gives what one definition may use."""

    def __init__(self, packs: Iterable[Pack] = ()) -> None:
        self._packs: dict[str, Pack] = {}
        for pack in packs:
            self.add(pack)

    def add(self, pack: Pack) -> None:
        if not isinstance(pack, Pack):
            raise PackError(f"not a Pack: {type(pack).__name__}")
        if pack.name in self._packs and self._packs[pack.name] is not pack:
            raise PackError(f"two packs are named {pack.name!r}")
        if pack.workspace_knowledge is not None:
            other = next((p.name for p in self._packs.values() if p is not pack
                          and p.workspace_knowledge is not None), None)
            if other is not None:
                raise PackError(
                    f"packs {other!r} and {pack.name!r} both give the workspace knowledge"
                )
        self._packs[pack.name] = pack

    def workspace_knowledge(self, workspace: str) -> Any:
        """The installed workspace Knowledge Base index of ``workspace``, or None."""
        for pack in self._packs.values():
            if pack.workspace_knowledge is not None:
                return pack.workspace_knowledge(workspace)
        return None

    @property
    def names(self) -> list[str]:
        return sorted(self._packs)

    def select(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The pieces of the packs ``names``, merged per kind; a name two of them provide, or a
        pack the deployment does not have, is refused."""
        merged: dict[str, dict[str, Any]] = {kind: {} for kind in _KINDS}
        owner: dict[tuple[str, str], str] = {}
        for name in names:
            pack = self._packs.get(name)
            if pack is None:
                known = ", ".join(self.names) or "none"
                raise PackError(f"unknown pack {name!r} (installed: {known})")
            for kind in _KINDS:
                for piece, value in getattr(pack, kind).items():
                    if (kind, piece) in owner and owner[(kind, piece)] != name:
                        raise PackError(
                            f"{kind} {piece!r} is provided by both {owner[(kind, piece)]!r} "
                            f"and {name!r}"
                        )
                    owner[(kind, piece)] = name
                    merged[kind][piece] = value
        return merged
