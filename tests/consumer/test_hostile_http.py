"""Hostile clients on the HTTP ports: drip-fed heads, too many connections, too many headers,
and a descriptor limit slow clients would exhaust. Every port (the health and metrics port of
``consume``, ``schedule`` and ``relay``, the webhook example) serves through
``consumer.webserver.server``; the health server stands for them here, with a real service's
turns running next to the slow clients in the descriptor test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumer.health import HealthServer
from consumer.webserver.server import (
    BoundedHttpServer,
    HttpError,
    HttpLimits,
    Request,
    Response,
    connection_budget,
)

HERE = Path(__file__).parent


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.read()
    except ConnectionResetError:
        return b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _drip(port: int, every_s: float, lines: int) -> tuple[float, bytes]:
    """A client that sends its request line and then one header line every ``every_s``
    seconds; how long until the server closed it, and what it said."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    answer = b""

    async def read() -> bytes:
        with contextlib.suppress(ConnectionError):
            return await reader.read()
        return b""

    reading = asyncio.create_task(read())
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        for n in range(lines):
            done, _ = await asyncio.wait({reading}, timeout=every_s)
            if done:
                break
            with contextlib.suppress(ConnectionError):
                writer.write(f"X-Drip-{n}: {n}\r\n".encode())
        answer = await asyncio.wait_for(reading, timeout=30)
        return time.monotonic() - started, answer
    finally:
        reading.cancel()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_drip_fed_heads_are_closed_at_the_deadline_while_healthz_answers() -> None:
    """Twenty clients each sending one header line every 2 s are answered 408 and closed at
    the head deadline, not kept for as long as they drip; /healthz answers meanwhile."""
    server = await HealthServer(
        host="127.0.0.1", port=0, ready=lambda: True, limits=HttpLimits(head_timeout_s=3.0)
    ).start()
    try:
        drips = [asyncio.create_task(_drip(server.port, 2.0, 30)) for _ in range(20)]
        await asyncio.sleep(0.5)
        assert (await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.0 200"
        )
        results = await asyncio.gather(*drips)
    finally:
        await server.stop()
    for elapsed, answer in results:
        assert answer.startswith(b"HTTP/1.0 408")
        assert 2.5 <= elapsed < 10  # at the deadline, long before 30 lines had dripped
    assert server.http.connections == 0


async def test_the_default_head_deadline_is_bounded() -> None:
    """The ports the commands start use the default limits: a finite head deadline and caps."""
    server = HealthServer(host="127.0.0.1", port=0, ready=lambda: True)
    limits = server.http.limits
    assert 0 < limits.head_timeout_s <= 30
    assert limits.max_header_count <= 100 and limits.max_head_bytes <= 64 * 1024
    assert limits.max_connections <= 256


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /healthz HTTP/1.1\r\n" + b"X-A: 1\r\n" * 65 + b"\r\n", b"431"),
        (b"GET /healthz HTTP/1.1\r\n" + b"X-B: " + b"b" * 9000 + b"\r\n" + b"X-C: "
         + b"c" * 9000 + b"\r\n\r\n", b"431"),
        (b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n", b"414"),
        (b"GET /healthz HTTP/1.1\r\n" + b"X-A: 1\r\n" * 64 + b"\r\n", b"200"),
    ],
)
async def test_header_count_and_head_size_are_capped(request_bytes: bytes, status: bytes) -> None:
    """More than 64 header lines, or a head over 16 KB in lines each under it, is 431; a
    request line over 16 KB is 414; 64 headers are still answered. The next request is
    answered either way."""
    server = await HealthServer(host="127.0.0.1", port=0, ready=lambda: True).start()
    try:
        response = await _exchange(server.port, request_bytes)
        after = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
    finally:
        await server.stop()
    assert response.startswith(b"HTTP/1.0 " + status)
    assert after.startswith(b"HTTP/1.0 200")


Held = list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]


async def _open_idle(port: int, count: int, held: Held) -> Held:
    """Open ``count`` connections, each sending a head it never finishes, into ``held``."""
    for _ in range(count):
        async with asyncio.timeout(5):  # a server that stopped accepting fails, not hangs
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")  # a head never finished
        await writer.drain()
        held.append((reader, writer))
    return held


async def _closed_by_server(reader: asyncio.StreamReader, within: float = 2.0) -> bool:
    try:
        async with asyncio.timeout(within):
            return await reader.read() == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


async def _close_all(held: Held) -> None:
    for _reader, writer in held:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_past_the_connection_cap_the_oldest_idle_client_is_dropped() -> None:
    """Eight idle clients fill a server capped at eight; each of the next ones drops the oldest
    idle client, never more than the cap stay open, and a probe among them is answered."""
    server = await HealthServer(
        host="127.0.0.1", port=0, ready=lambda: True,
        limits=HttpLimits(max_connections=8, head_timeout_s=30),
    ).start()
    held: Held = []
    try:
        await _open_idle(server.port, 8, held)
        await asyncio.sleep(0.2)
        assert server.http.connections == 8
        await _open_idle(server.port, 3, held)
        await asyncio.sleep(0.2)
        assert server.http.connections == 8
        dropped = [await _closed_by_server(reader) for reader, _ in held[:3]]
        assert dropped == [True, True, True]
        # The fourth oldest is still served (a drop happens on admission, at once).
        assert not await _closed_by_server(held[3][0], within=0.3)
        answer = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.0 200")
        assert server.http.dropped == 4  # three idle clients, then one for the probe
    finally:
        await _close_all(held)
        await server.stop()


async def test_past_the_cap_with_every_slot_answering_the_new_client_is_refused() -> None:
    """When every connection is being answered (a slow handler), a new one is closed at once
    instead of queueing past the cap; the answered ones complete."""
    release = asyncio.Event()

    async def slow(request: Request) -> Response:
        await release.wait()
        return Response(200, b"done\n")

    server = await BoundedHttpServer(
        slow, host="127.0.0.1", port=0, limits=HttpLimits(max_connections=4)
    ).start()
    try:
        answered = [asyncio.create_task(_exchange(server.port, b"GET / HTTP/1.1\r\n\r\n"))
                    for _ in range(4)]
        await asyncio.sleep(0.3)
        extra = await _exchange(server.port, b"GET / HTTP/1.1\r\n\r\n")
        assert extra == b""
        assert server.refused == 1
        release.set()
        results = await asyncio.gather(*answered)
    finally:
        await server.stop()
    assert all(r.startswith(b"HTTP/1.0 200") and r.endswith(b"done\n") for r in results)


async def test_bodies_are_bounded_in_size_and_time() -> None:
    """``Request.body()`` refuses a Content-Length past the cap (413) and a body that does not
    arrive in time (408); a handler's own bug is a 500, and the server keeps serving."""

    async def echo(request: Request) -> Response:
        if request.path == "/boom":
            raise RuntimeError("a handler bug")
        if request.path == "/teapot":
            raise HttpError(400, "no")
        return Response(200, await request.body())

    server = await BoundedHttpServer(
        echo, host="127.0.0.1", port=0,
        limits=HttpLimits(max_body_bytes=10, body_timeout_s=0.5),
    ).start()
    try:
        ok = await _exchange(server.port, b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
        big = await _exchange(server.port, b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n")
        slow = await _exchange(server.port, b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhe")
        bad = await _exchange(server.port, b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n")
        boom = await _exchange(server.port, b"GET /boom HTTP/1.1\r\n\r\n")
        teapot = await _exchange(server.port, b"GET /teapot HTTP/1.1\r\n\r\n")
    finally:
        await server.stop()
    assert ok.startswith(b"HTTP/1.0 200") and ok.endswith(b"\r\n\r\nhello")
    assert big.startswith(b"HTTP/1.0 413")
    assert slow.startswith(b"HTTP/1.0 408")
    assert bad.startswith(b"HTTP/1.0 400")
    assert boom.startswith(b"HTTP/1.0 500") and b"a handler bug" not in boom
    assert teapot.startswith(b"HTTP/1.0 400")


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=3000))
def test_any_bytes_get_an_answer_or_a_close(head: bytes) -> None:
    """Whatever bytes a client sends before closing its side, the server answers with a
    status line or closes, and the next client is answered."""

    async def run() -> tuple[bytes, bytes]:
        server = await HealthServer(host="127.0.0.1", port=0, ready=lambda: True).start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(head)
            writer.write_eof()
            try:
                async with asyncio.timeout(10):
                    answer = await reader.read()
            except ConnectionError:
                answer = b""
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            after = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
        finally:
            await server.stop()
        return answer, after

    answer, after = asyncio.run(run())
    assert answer == b"" or answer.startswith(b"HTTP/1.0 ")
    assert after.startswith(b"HTTP/1.0 200")


def test_the_connection_budget_is_a_share_of_the_descriptor_limit() -> None:
    """A quarter of the soft descriptor limit by default, the rest kept for the process."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        assert connection_budget() == soft // 4
    assert connection_budget(HttpLimits(descriptor_share=0.5)) >= connection_budget()


def test_slow_clients_under_a_low_descriptor_limit_leave_turns_working(
    database_url: str,
) -> None:
    """A consumer process limited to 256 descriptors (a container runtime's default is 1,024)
    serves its health port while 600 clients hold connections open on it; then it runs 90
    turns of 30 conversations on a real database pool: every conversation gets its own
    replies in order, /healthz answers all along, and the port held at most a quarter of the
    descriptors."""
    child = subprocess.Popen(
        [sys.executable, str(HERE / "slow_clients_process.py"), database_url,
         "256"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())

        async def probe() -> bytes:
            try:
                async with asyncio.timeout(5):
                    return await _exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n")
            except (OSError, TimeoutError) as exc:
                return repr(exc).encode()

        async def attack() -> tuple[list[bytes], int]:
            held: Held = []
            probes = []
            try:
                for _ in range(6):
                    with contextlib.suppress(OSError):
                        await _open_idle(port, 100, held)
                    probes.append(await probe())
                child.stdin.write("go\n")  # type: ignore[union-attr]
                child.stdin.flush()  # type: ignore[union-attr]
                for _ in range(3):
                    probes.append(await probe())
                return probes, len(held)
            finally:
                await _close_all(held)

        probes, opened = asyncio.run(attack())
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert all(p.startswith(b"HTTP/1.0 200") for p in probes), probes
    assert opened == 600
    assert result["replies"] == result["expected"]
    assert result["peak_connections"] <= 256 // 4


@pytest.mark.parametrize("process", ["consume", "schedule", "relay"])
async def test_every_command_port_is_bounded(process: str) -> None:
    """The port each long-running command starts (``start_health_server``) serves through
    the bounded server with the default limits: seventy idle clients leave it holding at most
    64, and a probe among them is answered."""
    import socket

    from consumer.health import start_health_server
    from consumer.settings import Settings
    from consumer.webserver.server import DEFAULT_LIMITS

    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    settings = Settings(metrics_host="127.0.0.1", metrics_port=port)
    server = await start_health_server(settings, ready=lambda: True, process=process)
    assert server is not None and server.http.limits == DEFAULT_LIMITS
    held: Held = []
    try:
        await _open_idle(server.port, 70, held)
        answer = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.0 200")
        assert server.http.peak_connections == DEFAULT_LIMITS.max_connections
    finally:
        await _close_all(held)
        await server.stop()
