"""A reply body is read no further than its bound: ``JsonApi.post`` streams it and stops as
soon as the bytes passed ``max_reply_bytes``, refuses a declared ``Content-Length`` over it
unread, inflates a compressed body only as far as the bound, and reads an error reply's body
only as far as its explanation needs. Whatever a server sends, a call returns a JSON object or
raises ``ProviderError``.

The bodies here come from in-process streams that count the bytes pulled from them, so a test
sees how much of a body was read; ``test_pool.py`` does the same over real sockets."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from engine.errors import ProviderError, UnusableReply
from engine.providers.http import DETAIL_LIMIT, ERROR_BODY_BYTES, JsonApi
from engine.providers.reply_body import ACCEPT_ENCODING, BodyOverLimit, UnreadableBody, read_body

CHUNK = 64 * 1024
BOUND = 80 * 1024


class CountingBody(httpx.AsyncByteStream):
    """A body of ``total`` bytes (None: endless) in ``CHUNK`` pieces, counting what was pulled
    from it and whether it was closed."""

    def __init__(self, chunks: Callable[[int], bytes] | list[bytes],
                 total: int | None = None) -> None:
        self._chunks = chunks
        self._total = total
        self.pulled = 0
        self.closed = False
        self.exhausted = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if isinstance(self._chunks, list):
            for chunk in self._chunks:
                self.pulled += len(chunk)
                yield chunk
            self.exhausted = True
            return
        index = 0
        while self._total is None or self.pulled < self._total:
            chunk = self._chunks(index)
            index += 1
            self.pulled += len(chunk)
            yield chunk
        self.exhausted = True

    async def aclose(self) -> None:
        self.closed = True


def _api(handler: Callable[[httpx.Request], httpx.Response], timeout: float = 5.0) -> JsonApi:
    return JsonApi(provider="p", base_url="http://model", headers={}, secrets=(),
                   timeout=timeout, transport=httpx.MockTransport(handler))


async def _post(body: CountingBody, headers: dict[str, str] | None = None, status: int = 200,
                max_reply_bytes: int | None = BOUND) -> dict[str, object]:
    api = _api(lambda _r: httpx.Response(status, headers=headers or {}, stream=body))
    try:
        return await api.post("x", {}, max_reply_bytes=max_reply_bytes)
    finally:
        await api.aclose()


async def test_an_endless_body_is_refused_after_the_bound() -> None:
    """A 200 whose body never ends (no length, ``{"a": "xxxx...``) is an ``UnusableReply``
    once the bytes read pass the bound: one chunk past it at most, and the stream closed."""
    body = CountingBody(lambda i: b'{"a": "' if i == 0 else b"x" * CHUNK)
    with pytest.raises(UnusableReply, match=f"at least .* bytes, over the {BOUND} its token cap"):
        await _post(body)
    assert BOUND < body.pulled <= BOUND + CHUNK
    assert body.closed and not body.exhausted


async def test_a_declared_length_over_the_bound_is_refused_unread() -> None:
    """``Content-Length: 50,000,000``: refused before a byte of the body is read."""
    body = CountingBody(lambda _i: b"x" * CHUNK, total=50_000_000)
    with pytest.raises(UnusableReply, match="50000000 bytes \\(its Content-Length\\), over the"):
        await _post(body, {"content-length": "50000000"})
    assert body.pulled == 0 and body.closed


async def test_a_lying_length_is_still_cut_at_the_bound() -> None:
    """A ``Content-Length`` under the bound with more bytes behind it: cut all the same."""
    body = CountingBody(lambda _i: b"x" * CHUNK, total=50_000_000)
    with pytest.raises(UnusableReply, match="at least"):
        await _post(body, {"content-length": "10"})
    assert body.pulled <= BOUND + CHUNK


async def test_a_reply_at_the_bound_is_taken() -> None:
    """A JSON object of exactly ``BOUND`` bytes, in odd-sized pieces, is decoded; one byte
    more is refused."""
    text = json.dumps({"message": "y" * (BOUND - 15)}).encode()
    assert len(text) == BOUND
    pieces = [text[i:i + 7777] for i in range(0, len(text), 7777)]
    assert await _post(CountingBody(pieces)) == {"message": "y" * (BOUND - 15)}
    with pytest.raises(UnusableReply, match=f"at least {BOUND} bytes, over the {BOUND - 1}"):
        await _post(CountingBody(pieces), max_reply_bytes=BOUND - 1)


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
async def test_a_compression_bomb_is_inflated_no_further_than_the_bound(coding: str) -> None:
    """50 MB of zeros compress to about 50 KB: inflated only as far as the bound, whether
    gzip, zlib-wrapped deflate or the raw deflate some servers send as ``deflate``."""
    zeros = b"0" * 50_000_000
    if coding == "gzip":
        packed = gzip.compress(zeros)
    else:
        packer = zlib.compressobj(wbits=zlib.MAX_WBITS if coding == "deflate" else -15)
        packed = packer.compress(zeros) + packer.flush()
    assert len(packed) < BOUND
    body = CountingBody([packed[i:i + 4096] for i in range(0, len(packed), 4096)])
    header = "gzip" if coding == "gzip" else "deflate"
    with pytest.raises(UnusableReply, match="at least"):
        await _post(body, {"content-encoding": header})
    assert body.pulled < BOUND  # a few wire chunks were enough to pass the bound inflated


@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "deflate", "identity"])
async def test_a_compressed_reply_under_the_bound_is_read(coding: str) -> None:
    text = json.dumps({"message": "hello " * 1000}).encode()
    packed = (gzip.compress(text) if "gzip" in coding
              else zlib.compress(text) if coding == "deflate" else text)
    reply = await _post(CountingBody([packed[:10], packed[10:]]), {"content-encoding": coding})
    assert reply == {"message": "hello " * 1000}


async def test_a_coding_not_asked_for_is_a_malformed_reply() -> None:
    """``br`` (not advertised: ``Accept-Encoding`` says ``gzip, deflate``) or corrupt gzip:
    a retryable malformed response, never an exception of another kind."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["accept-encoding"])
        return httpx.Response(200, headers={"content-encoding": "br"},
                              stream=CountingBody([b"\x8b\x00"]))

    api = _api(handler)
    with pytest.raises(ProviderError, match=r"malformed response: HTTP 200: .*'br'") as caught:
        await api.post("x", {}, max_reply_bytes=BOUND)
    assert caught.value.kind == "retryable" and seen == [ACCEPT_ENCODING]
    with pytest.raises(ProviderError, match="corrupt gzip") as corrupt:
        await _post(CountingBody([b"not gzip at all"]), {"content-encoding": "gzip"})
    assert corrupt.value.kind == "retryable"


async def test_an_error_reply_reads_only_the_start_of_its_body() -> None:
    """A 503 with an endless body: the error keeps its status and the start of the text, and
    no more than ``ERROR_BODY_BYTES`` and a chunk are read."""
    body = CountingBody(lambda _i: b"busy " * (CHUNK // 5))
    with pytest.raises(ProviderError, match="HTTP 503: busy busy") as caught:
        await _post(body, {"retry-after": "3"}, status=503)
    assert caught.value.kind == "retryable" and caught.value.retry_after == 3.0
    assert len(str(caught.value)) < DETAIL_LIMIT + 100
    assert body.pulled <= ERROR_BODY_BYTES + CHUNK and body.closed


async def test_a_compressed_error_reply_keeps_the_api_message() -> None:
    """A gzip'd 400 error object is inflated and read as the API's own message."""
    error = json.dumps({"error": {"type": "invalid_request_error", "message": "bad field"}})
    body = CountingBody([gzip.compress(error.encode())])
    with pytest.raises(ProviderError, match="invalid_request_error: bad field") as caught:
        await _post(body, {"content-encoding": "gzip"}, status=400)
    assert caught.value.kind == "fatal"


async def test_reading_the_body_is_inside_the_call_timeout() -> None:
    """A server that sends its headers at once and then trickles the body forever times out
    at ``timeout``, the body being part of the call."""

    class Trickle(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'{"a": '
            while True:
                await asyncio.sleep(0.05)
                yield b" "

    api = _api(lambda _r: httpx.Response(200, stream=Trickle()), timeout=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ProviderError, match=r"no answer within 0\.3s"):
        await api.post("x", {}, max_reply_bytes=BOUND)
    assert loop.time() - started < 2


async def test_read_body_cut_returns_the_first_bytes() -> None:
    class Streamed(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b"abcdefghij"

    response = httpx.Response(200, stream=Streamed())
    assert await read_body(response, 25, cut=True) == b"abcdefghijabcdefghijabcde"
    with pytest.raises(ValueError, match="negative"):
        await read_body(httpx.Response(200, stream=Streamed()), -1)
    with pytest.raises(BodyOverLimit) as over:
        await read_body(httpx.Response(200, content=b"x" * 30), 25)  # already in memory
    assert over.value.describe() == "30 bytes"
    with pytest.raises(UnreadableBody, match="'gzip, gzip'"):
        await read_body(httpx.Response(200, headers={"content-encoding": "gzip, gzip"},
                                       stream=Streamed()), 25)


CODINGS = st.sampled_from([None, "identity", "gzip", "deflate", "br", "gzip, deflate", "zzz"])


@settings(max_examples=300, deadline=None)
@given(
    status=st.sampled_from([200, 201, 204, 299, 400, 401, 404, 409, 429, 500, 503]),
    body=st.one_of(st.binary(max_size=3000),
                   st.builds(lambda d: json.dumps(d).encode(),
                             st.dictionaries(st.text(max_size=5), st.text(max_size=40),
                                             max_size=5))),
    coding=CODINGS,
    compress=st.booleans(),
    length=st.one_of(st.none(), st.integers(0, 10_000), st.just("nonsense")),
    split=st.integers(1, 700),
    limit=st.one_of(st.none(), st.integers(0, 2000)),
)
def test_any_body_is_a_json_object_or_a_provider_error(
    status: int, body: bytes, coding: str | None, compress: bool, length: int | str | None,
    split: int, limit: int | None,
) -> None:
    """Arbitrary bytes as the body of any status, under any ``Content-Encoding`` (really
    compressed or not), with any ``Content-Length`` and chunking: ``post`` returns a dict or
    raises ``ProviderError`` (``UnusableReply`` among them), never anything else; a dict comes
    only from a 2xx within the bound, and no more than the bound and a chunk is read."""
    wire = body
    if compress and coding == "gzip":
        wire = gzip.compress(body)
    elif compress and coding == "deflate":
        wire = zlib.compress(body)
    headers = {}
    if coding is not None:
        headers["content-encoding"] = coding
    if length is not None:
        headers["content-length"] = str(length)
    stream = CountingBody([wire[i:i + split] for i in range(0, len(wire), split)])

    async def call() -> object:
        return await _post(stream, headers, status=status, max_reply_bytes=limit)

    try:
        result = asyncio.run(call())
    except ProviderError as exc:
        event(type(exc).__name__)
    else:
        event("a JSON object")
        assert isinstance(result, dict)
        assert 200 <= status < 300
        assert limit is None or len(json.dumps(result).encode()) <= 6 * limit + 2
    bound = ERROR_BODY_BYTES if not 200 <= status < 300 else limit
    if bound is not None:  # a compressed body's wire bytes may pass its size by a little
        slack = bound // 1024 + 1024 if coding in ("gzip", "deflate") else 0
        assert stream.pulled <= bound + slack + split
