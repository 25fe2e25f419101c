"""Reading an HTTP reply body without reading past a bound.

A JSON API's reply is taken whole, so a server that answers with megabytes (a broken one
looping on its output, a hostile one) must be stopped as soon as the bytes read pass the
bound, not read into memory first and measured after: the body is read chunk by chunk off the
connection, a declared ``Content-Length`` over the bound is refused before a byte is read, and
a compressed body is inflated only as far as the bound (a few kilobytes of gzip can stand for
gigabytes, and httpx's own decoder inflates each chunk in full). Only the codings a client
advertises with ``ACCEPT_ENCODING`` are read; any other is ``UnreadableBody``.
"""

from __future__ import annotations

import zlib

import httpx

ACCEPT_ENCODING = "gzip, deflate"
"""The ``Accept-Encoding`` a bounded reader can honour: those it inflates within the bound."""

_GZIP = frozenset({"gzip", "x-gzip"})


class BodyOverLimit(Exception):
    """The body is larger than the bound. ``known``: ``"read"`` when ``size`` bytes were read
    and reading stopped (the body may hold more), ``"declared"`` when its ``Content-Length``
    says ``size`` and nothing was read, ``"whole"`` when the body was already in memory."""

    def __init__(self, size: int, *, known: str = "read") -> None:
        super().__init__(size)
        self.size = size
        self.known = known

    def describe(self) -> str:
        """The size as far as it is known: ``"at least 300000 bytes"``."""
        if self.known == "declared":
            return f"{self.size} bytes (its Content-Length)"
        if self.known == "whole":
            return f"{self.size} bytes"
        return f"at least {self.size} bytes"


class UnreadableBody(Exception):
    """A body in a coding this reader does not inflate, or whose compression is corrupt."""


class _Inflater:
    """gzip or deflate, inflated at most ``room`` bytes at a time. ``deflate`` is the zlib
    format by the standard, raw deflate from some servers: the first chunk tells which, as in
    httpx's own decoder."""

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 16 if coding in _GZIP
                                           else zlib.MAX_WBITS)
        self._first = True

    def feed(self, data: bytes, room: int) -> bytes:
        try:
            try:
                return self._inflate.decompress(data, room)
            except zlib.error:
                if not (self._first and self._coding == "deflate"):
                    raise
                self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
                return self._inflate.decompress(data, room)
            finally:
                self._first = False
        except zlib.error as exc:
            raise UnreadableBody(f"corrupt {self._coding} body ({exc})") from None

    def flush(self, room: int) -> bytes:
        try:
            return self._inflate.flush(room)
        except zlib.error as exc:
            raise UnreadableBody(f"corrupt {self._coding} body ({exc})") from None


def _inflater(headers: httpx.Headers) -> _Inflater | None:
    codings = [c.strip().lower() for c in headers.get("content-encoding", "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and (codings[0] in _GZIP or codings[0] == "deflate"):
        return _Inflater(codings[0])
    # Not what the client asked for: unknown, or several codings stacked.
    raise UnreadableBody(f"a body in Content-Encoding {', '.join(codings)!r}, which was not asked"
                         " for")


def _declared_length(headers: httpx.Headers) -> int | None:
    raw = headers.get("content-length", "").strip()
    return int(raw) if raw.isdigit() else None


async def read_body(response: httpx.Response, limit: int, *, cut: bool = False) -> bytes:
    """The body of a streamed ``response``, decoded, read no further than ``limit`` bytes and
    the chunk that passes it.

    Past ``limit`` (decoded bytes, or about as many wire bytes of a compressed body):
    ``BodyOverLimit``, or with ``cut`` the first ``limit`` bytes, the rest never read. The
    caller closes the response either way (a body left unread closes its connection rather
    than returning it to the pool). A response already read into memory (one an in-process
    transport built from bytes) is measured as it is. ``UnreadableBody`` for a coding not
    advertised, or corrupt data."""
    if limit < 0:
        raise ValueError(f"a body limit cannot be negative; got {limit}")
    if response.is_stream_consumed:
        body = response.content
        if len(body) > limit:
            if cut:
                return body[:limit]
            raise BodyOverLimit(len(body), known="whole")
        return body
    inflater = _inflater(response.headers)
    declared = _declared_length(response.headers)
    if inflater is None and declared is not None and declared > limit and not cut:
        raise BodyOverLimit(declared, known="declared")
    parts: list[bytes] = []
    size = wire = 0
    # Compressed, a body's wire bytes stay near its inflated size (stored blocks add 5 bytes
    # in 64 KiB); past that the stream inflates to little or nothing and is cut off too.
    wire_limit = limit if inflater is None else limit + limit // 1024 + 1024
    async for chunk in response.aiter_raw():
        wire += len(chunk)
        data = chunk if inflater is None else inflater.feed(chunk, limit - size + 1)
        parts.append(data)
        size += len(data)
        if size > limit or wire > wire_limit:
            if cut:
                return b"".join(parts)[:limit]
            raise BodyOverLimit(max(size, wire))
    if inflater is not None:
        tail = inflater.flush(limit - size + 1)
        parts.append(tail)
        size += len(tail)
        if size > limit:
            if cut:
                return b"".join(parts)[:limit]
            raise BodyOverLimit(size)
    return b"".join(parts)


__all__ = ["ACCEPT_ENCODING", "BodyOverLimit", "UnreadableBody", "read_body"]
