"""A free TCP port on this host. Imports nothing of the project, so the peers' runners, which
run in their own environment without turnflow installed, use it too."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at the moment of asking (the OS's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
