"""The code pack of the demo agent stored as data (``examples/agents/demo.json``).

A pack holds what an agent definition cannot: here the ``book_repair`` action of the bike shop.
Install it in a deployment with ``PACKS=examples.demo_pack:pack``; a definition lists
``"packs": ["bike_shop"]`` and its ``do`` steps name the action.
"""

from __future__ import annotations

from engine.packs import Pack
from examples.demo_agent import book_repair

pack = Pack(name="bike_shop", actions={"book_repair": book_repair})

__all__ = ["pack"]
