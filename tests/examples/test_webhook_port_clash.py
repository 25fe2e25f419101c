"""The webhook adapter started on a port another process holds ends with one line that says so
and how to move it, not a traceback."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from examples import webhook_adapter


class _Producer:
    """Stands in for the Kafka producer: the port clash comes before any record is sent."""

    def __init__(self, **_: Any) -> None:
        self.stopped = False

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.stopped = True


def test_a_port_in_use_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook_adapter, "AIOKafkaProducer", _Producer)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(SystemExit) as exited:
            webhook_adapter.main(["--host", "127.0.0.1", "--port", str(port)])
    message = str(exited.value.code)
    assert message.startswith(f"webhook adapter: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in message and "--port" in message
    assert "\n" not in message
