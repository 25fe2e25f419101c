"""What the HTTP providers share: one JSON POST, its failures classified, each call timed.

Every failure of a call leaves as ``ProviderError``:

    retryable   408, 409, 425, 429 and every 5xx; timeouts; connection and other network
                errors; a 2xx whose body is not the JSON object the API documents; a reply
                cut off at the token limit, or not the JSON object the call asked for; a
                reply far larger than its token cap allows (``reply_byte_limit``)
    fatal       401, 403 and every other 4xx (a prompt past the context window is a 400);
                any status whose error body says the request itself is malformed (some
                servers answer a request shape they do not support with a 500, and retrying
                the same body can never pass); a request that cannot be sent at all (bad URL,
                an illegal header value)

``Retry-After`` (seconds or an HTTP-date) and ``retry-after-ms`` become ``retry_after`` seconds.

The API key travels only in a request header. It is held in a ``Secret`` whose ``repr`` is
masked, every message built from a response or a library exception is scrubbed of it, and
exceptions are raised ``from None`` so no traceback chains back to a request that carried it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, Self, TypedDict

import httpx

from engine import strict_json
from engine.clock import Clock, SystemClock
from engine.errors import MAX_RETRY_AFTER_S, ProviderError, ProviderErrorKind, UnusableReply
from engine.providers.base import CallRecord, ModelRequest, ModelResponse, ProviderHooks, Usage
from engine.providers.pool import ShardedTransport
from engine.providers.reply_body import ACCEPT_ENCODING, BodyOverLimit, UnreadableBody, read_body
from engine.records import record

log = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
"""4xx statuses that mean "not now" rather than "never"; every 5xx is retryable too."""

DETAIL_LIMIT = 2000
"""How much of a server's own error text a ``ProviderError`` keeps: enough for the server's
explanation (validation errors list every field), bounded so a huge body never floods a log."""

REFUSED_SHAPE_HINTS = (
    "invalid_request_error", "input should be", "validation error", "field required",
    "extra inputs are not permitted", "unrecognized request argument", "literal_error",
    "must be one of", "is not supported", "unsupported parameter", "unsupported value",
    "cannot have 2 or more", "bad request", "invalid request", "invalid type for",
)
"""Phrases by which servers say "this request is malformed" in an error body. A body with one
of them is fatal whatever the status: llama-cpp-python, for one, answers an unsupported
``response_format`` with HTTP 500 and a validation error."""

BYTES_PER_TOKEN = 64
"""The most body bytes one generated token is taken to cost: the longest tokens of common
vocabularies are a few dozen characters, and a server that escapes non-ASCII text writes each
character as six bytes (``\\u00e9``). An honest reply stays far below it."""

REPLY_OVERHEAD_BYTES = 16 * 1024
"""Body bytes besides the generated text: ids, usage, the envelope's structure."""

MAX_REPLY_BYTES = 256 * 1024
"""The largest reply body taken whatever the token cap (or without one): a chat reply is never
near it, and a message under it always fits a broker record of the default 1 MiB, so a reply
that is taken can always be delivered."""


def reply_byte_limit(max_tokens: int | None) -> int:
    """The largest reply body a call capped at ``max_tokens`` can honestly produce, at most
    ``MAX_REPLY_BYTES``. A bigger one (a server answering 200 with megabytes of text and
    ``finish_reason: "stop"``) is refused as an unusable reply: retried, then the fallback,
    never stored nor sent back to the model in the history."""
    if max_tokens is None or max_tokens <= 0:
        return MAX_REPLY_BYTES
    return min(MAX_REPLY_BYTES, max_tokens * BYTES_PER_TOKEN + REPLY_OVERHEAD_BYTES)


_CONTEXT_HINTS = ("context_length", "context length", "context window", "prompt is too long",
                  "maximum context", "too many tokens")


class Secret:
    """A string that never shows itself in ``repr``/``str``; ``reveal()`` is the only way in."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


def checked_api_key(value: str) -> Secret:
    """The key as a ``Secret``, surrounding whitespace dropped (keys read from files end in a
    newline); ``ValueError`` without the key in it when it cannot travel in an HTTP header."""
    value = value.strip()
    if any(not (32 < ord(ch) < 127) for ch in value):
        raise ValueError("the API key holds characters that cannot be sent in an HTTP header")
    return Secret(value)


def redact(text: str, secrets: tuple[Secret, ...]) -> str:
    """``text`` with every secret value replaced by ``***``."""
    for secret in secrets:
        value = secret.reveal()
        if value:
            text = text.replace(value, "***")
    return text


def parse_retry_after(headers: Mapping[str, str], now: datetime) -> float | None:
    """Seconds to wait according to the response headers (at most ``MAX_RETRY_AFTER_S``), or
    None when they give no hint.

    ``retry-after-ms`` (sent by OpenAI) wins over ``Retry-After``, which is either a number of
    seconds or an HTTP-date; a date in the past means "now" (0).
    """
    seconds = _retry_after(headers, now)
    return None if seconds is None else min(seconds, MAX_RETRY_AFTER_S)


def _retry_after(headers: Mapping[str, str], now: datetime) -> float | None:
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT
        return None
    return max(0.0, (when - now).total_seconds())


def status_kind(status: int) -> ProviderErrorKind:
    """The kind of a non-2xx status: see the module docstring."""
    if status in RETRYABLE_STATUSES or status >= 500:
        return "retryable"
    return "fatal"


def _api_detail(response: httpx.Response) -> str:
    """The API's own error message when the body has one, else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            parts = [str(error[key]) for key in ("type", "code", "message") if error.get(key)]
            if parts:
                return ": ".join(parts)
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return response.text.strip()


def refused_shape(detail: str) -> bool:
    """Whether an error body says the request itself is malformed (see ``REFUSED_SHAPE_HINTS``)."""
    lowered = detail.lower()
    return any(hint in lowered for hint in REFUSED_SHAPE_HINTS)


def error_for_status(
    response: httpx.Response, *, provider: str, now: datetime, secrets: tuple[Secret, ...]
) -> ProviderError:
    """The ``ProviderError`` a non-2xx response stands for."""
    status = response.status_code
    kind = status_kind(status)
    detail = redact(_api_detail(response), secrets)[:DETAIL_LIMIT]
    if status in (400, 413) and any(hint in detail.lower() for hint in _CONTEXT_HINTS):
        detail = f"context length exceeded: {detail}"
    elif status not in RETRYABLE_STATUSES and refused_shape(detail):
        kind = "fatal"
        # Status only: the server's words may quote the request, and so the customer.
        log.warning("%s: HTTP %s: the server refused the request as malformed; not retried",
                    provider, status)
        detail = (f"the server refused the request as malformed (retrying cannot help; if it "
                  f"lacks structured output, try another TURNFLOW_MODEL_JSON_MODE): {detail}")
    retry_after = parse_retry_after(response.headers, now) if kind == "retryable" else None
    message = f"{provider}: HTTP {status}" + (f": {detail}" if detail else "")
    return ProviderError(message, kind=kind, status=status, retry_after=retry_after)


def _transport_kind(exc: httpx.HTTPError) -> ProviderErrorKind:
    # A request that could not even be written (illegal header, unknown scheme, bad URL) fails
    # the same way every time; anything that happened on the wire may pass.
    if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
        return "fatal"
    return "retryable"


DEFAULT_CONNECTIONS = 100
"""Connections one provider opens to its server at most, and keeps alive between calls:
httpx's own ceiling, above the 64 model calls a consumer runs at once by default
(``MAX_IN_FLIGHT``); a host running more passes its own number."""


class JsonApi:
    """POSTs JSON to one API and returns the decoded JSON object, or raises ``ProviderError``.

    Owns its ``httpx.AsyncClient`` (created on first use, closed by ``aclose``) unless one is
    passed in, in which case the caller closes it. ``timeout`` bounds the whole call, not only
    each read, so a server that trickles bytes still times out.

    The client it owns keeps alive as many connections as it may open (``connections``, over a
    ``ShardedTransport``): a service runs many calls at once, and httpx's default keeps only 20
    of its 100, so with more than 20 calls in the air most calls would connect afresh (a TCP,
    and for an ``https`` server a TLS, handshake) and close their connection after the answer.
    """

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        secrets: tuple[Secret, ...],
        timeout: float,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        connections: int = DEFAULT_CONNECTIONS,
    ) -> None:
        if connections < 1:
            raise ValueError(f"connections must be at least 1; got {connections}")
        self.provider = provider
        self.connections = connections
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # only the codings a reply can be inflated in within its bound (``reply_body``)
        self._headers = {"Accept-Encoding": ACCEPT_ENCODING, **headers}
        self._secrets = secrets
        self._clock: Clock = clock or SystemClock()
        self._client = client
        self._owns_client = client is None
        self._transport = transport

    def __repr__(self) -> str:
        return f"JsonApi(provider={self.provider!r}, base_url={self.base_url!r})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                transport=self._transport or ShardedTransport(self.connections),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None

    async def post(
        self, path: str, body: Mapping[str, Any], *, max_reply_bytes: int | None = None
    ) -> dict[str, Any]:
        """The decoded JSON object of a 2xx answer; ``max_reply_bytes`` bounds its body (see
        ``reply_byte_limit``): a bigger one is an ``UnusableReply``, never decoded, and never
        read further than the bound (the body is streamed, a ``Content-Length`` over it refused
        unread). ``timeout`` covers reading the body too."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        try:
            async with asyncio.timeout(self.timeout):
                client = self._http()
                request = client.build_request("POST", url, json=body, headers=self._headers)
                response = await client.send(request, stream=True)
                try:
                    if not response.is_success:
                        raise error_for_status(
                            await _error_response(response), provider=self.provider,
                            now=self._clock.now(), secrets=self._secrets,
                        )
                    content = await self._reply_body(response, max_reply_bytes)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise ProviderError(
                f"{self.provider}: no answer within {self.timeout:g}s", kind="retryable"
            ) from None
        except httpx.TimeoutException as exc:
            raise ProviderError(
                f"{self.provider}: timed out after {self.timeout:g}s ({type(exc).__name__})",
                kind="retryable",
            ) from None
        except httpx.HTTPError as exc:
            detail = redact(str(exc), self._secrets)[:DETAIL_LIMIT]
            raise ProviderError(
                f"{self.provider}: {type(exc).__name__}: {detail}", kind=_transport_kind(exc)
            ) from None
        try:
            decoded = strict_json.loads(content)
        except (ValueError, UnicodeDecodeError, RecursionError):
            decoded = None
        if not isinstance(decoded, dict):
            raise malformed(self.provider, f"HTTP {response.status_code} body is not a JSON object",
                            status=response.status_code)
        return decoded

    async def _reply_body(self, response: httpx.Response, max_reply_bytes: int | None) -> bytes:
        """A 2xx body, read no further than ``max_reply_bytes`` (and the chunk that passes it)."""
        try:
            if max_reply_bytes is None:
                return await response.aread()
            return await read_body(response, max_reply_bytes)
        except BodyOverLimit as over:
            raise unusable_reply(
                self.provider, f"a reply body of {over.describe()}, over the {max_reply_bytes} "
                "its token cap allows; not used") from None
        except UnreadableBody as exc:
            raise malformed(self.provider, f"HTTP {response.status_code}: {exc}",
                            status=response.status_code) from None


ERROR_BODY_BYTES = 64 * 1024
"""How much of an error reply's body is read: room for an API's error object (a validation
error lists every field) well past ``DETAIL_LIMIT``; the rest is never read."""


async def _error_response(response: httpx.Response) -> httpx.Response:
    """A non-2xx streamed ``response`` as one read into memory for ``error_for_status``: its
    status and headers, and at most ``ERROR_BODY_BYTES`` of its body, decoded (none if its
    coding cannot be read)."""
    try:
        content = await read_body(response, ERROR_BODY_BYTES, cut=True)
    except UnreadableBody:
        content = b""
    headers = httpx.Headers(response.headers)
    for name in ("content-encoding", "content-length", "transfer-encoding"):
        headers.pop(name, None)
    return httpx.Response(response.status_code, headers=headers, content=content,
                          request=response.request)


def malformed(provider: str, why: str, *, status: int | None = None) -> ProviderError:
    """A 2xx whose body is not what the API documents: retryable, the next answer may be fine."""
    return ProviderError(f"{provider}: malformed response: {why}", kind="retryable", status=status)


def unusable_reply(provider: str, why: str) -> UnusableReply:
    """A reply that came back whole but cannot be used (cut off at the token limit, not the
    JSON object asked for): logged with the reason and raised as ``UnusableReply`` (retryable),
    so none of it reaches a customer: understand reads it as an empty judgement, speak as a
    failed call (the retry ladder or the fallback). ``why`` never quotes the reply, which may
    echo the customer's words."""
    log.warning("%s: unusable reply: %s", provider, why)
    return UnusableReply(f"{provider}: unusable reply: {why}")


def truncation(provider: str, *, reason: str, max_tokens: int | None) -> UnusableReply:
    """The error for a reply the server stopped at its token limit."""
    cap = f"max_tokens {max_tokens}" if max_tokens is not None else "the server's own cap"
    return unusable_reply(
        provider, f"cut off at the token limit (stop reason {reason!r}, {cap}); raise "
        "TURNFLOW_MODEL_MAX_TOKENS if this repeats")


NOT_JSON = "the reply is not the JSON object the call asked for"


def decode_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in a model's text, tolerating a Markdown code fence or words around one
    object; None when there is none."""
    text = text.strip()
    if text.startswith("```"):
        text = text.removeprefix("```json").removeprefix("```JSON").removeprefix("```")
        text = text.removesuffix("```").strip()
    for candidate in (text, text[text.find("{"):text.rfind("}") + 1]):
        try:
            value = strict_json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


async def observed(
    hooks: ProviderHooks,
    *,
    provider: str,
    schema_name: str,
    call: Callable[[], Awaitable[ModelResponse]],
    timer: Callable[[], float] = time.perf_counter,
    model: str | None = None,
    request: ModelRequest | None = None,
) -> ModelResponse:
    """Run ``call`` and report one ``CallRecord`` to the hooks, whatever the outcome: with the
    ``model`` asked for and the ``request`` sent, the response (or the error's class) after."""
    asked: dict[str, Any] = {}
    if model is not None:
        asked["model"] = model
    if request is not None:
        asked["request"] = request
    started = timer()
    try:
        response = await call()
    except ProviderError as exc:
        hooks.emit(_call_record(
            provider, schema_name, timer() - started, False, error_kind=exc.kind,
            error_type=type(exc).__name__, **asked,
        ))
        raise
    except Exception as exc:
        # The engine treats any other failure as retryable; report it the same way.
        hooks.emit(_call_record(
            provider, schema_name, timer() - started, False, error_kind="retryable",
            error_type=type(exc).__name__, **asked,
        ))
        raise
    hooks.emit(_call_record(
        provider, schema_name, timer() - started, True, usage=response.usage,
        response=response, **asked,
    ))
    return response


_GIVEN = frozenset({"error_kind", "usage", "model", "error_type", "request", "response"})


def _call_record(
    provider: str, schema_name: str, duration_s: float, ok: bool, **given: Any
) -> CallRecord:
    """``CallRecord(provider=..., schema_name=..., duration_s=..., ok=..., **given)`` (given:
    ``error_kind``, ``usage``, ``model``, ``error_type``, ``request``, ``response``), built as
    ``engine.records`` builds a turn's own records: one per model call. A value validation
    would convert (a duration not a float, a str subclass, a usage of another type) takes the
    validated construction."""
    error_kind, usage = given.get("error_kind"), given.get("usage")
    model, error_type = given.get("model"), given.get("error_type")
    request, response = given.get("request"), given.get("response")
    if (
        type(provider) is not str
        or type(schema_name) is not str
        or type(duration_s) is not float
        or type(ok) is not bool
        or (error_kind is not None and type(error_kind) is not str)
        or (usage is not None and type(usage) is not Usage)
        or (model is not None and type(model) is not str)
        or (error_type is not None and type(error_type) is not str)
        or (request is not None and type(request) is not ModelRequest)
        or (response is not None and type(response) is not ModelResponse)
        or not given.keys() <= _GIVEN
    ):
        return CallRecord(
            provider=provider, schema_name=schema_name, duration_s=duration_s, ok=ok, **given
        )
    values = {
        "provider": provider,
        "schema_name": schema_name,
        "duration_s": duration_s,
        "ok": ok,
        "error_kind": error_kind,
        "usage": usage,
        "model": model,
        "error_type": error_type,
        "request": request,
        "response": response,
    }
    return record(CallRecord, values, {"provider", "schema_name", "duration_s", "ok", *given})


def token_count(value: Any) -> int | None:
    """A token count as the API gave it, or None for anything that is not one (a bool, a
    negative number, a float, a string)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_from(raw: Any, *, input_key: str, output_key: str) -> Usage | None:
    """The token counts of a reply's usage object under the API's own key names; a count that
    is not a token count is None, and a usage that is not an object is None altogether."""
    if not isinstance(raw, dict):
        return None
    return Usage(input_tokens=token_count(raw.get(input_key)),
                 output_tokens=token_count(raw.get(output_key)))


class HttpOptions(TypedDict, total=False):
    """The keyword arguments every HTTP provider takes besides its model's own settings."""

    base_url: str
    timeout: float
    hooks: ProviderHooks | None
    clock: Clock | None
    client: httpx.AsyncClient | None
    transport: httpx.AsyncBaseTransport | None
    connections: int
    timer: Callable[[], float]
    env: Mapping[str, str] | None


class JsonApiProvider:
    """What a provider over one ``JsonApi`` keeps the same whatever the API: the key found and
    checked and held as a ``Secret``, the client's lifetime, how it names itself, and one
    ``CallRecord`` per call to the hooks.

    A subclass names its API (``label``, ``provider_name``), where its key is looked for when
    none is given (``api_key_env``, in order), its default server (``default_base_url``) and
    the headers its key travels in (``auth_headers``); it builds the request body and parses
    the reply, nothing else.
    """

    label: ClassVar[str]
    provider_name: ClassVar[str]
    api_key_env: ClassVar[tuple[str, ...]]
    default_base_url: ClassVar[str]
    model: str

    @staticmethod
    def auth_headers(api_key: str) -> dict[str, str]:
        """The headers every request carries for the (possibly empty) key."""
        raise NotImplementedError

    def __init__(
        self,
        api_key: str | None,
        *,
        base_url: str | None = None,
        timeout: float = 60.0,
        hooks: ProviderHooks | None = None,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        connections: int = DEFAULT_CONNECTIONS,
        timer: Callable[[], float] = time.perf_counter,
        env: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if env is None else env
        if api_key is None:
            api_key = next((environ[name] for name in self.api_key_env if environ.get(name)), "")
        self._key = checked_api_key(api_key)
        self.hooks = hooks or ProviderHooks()
        self._timer = timer
        self._api = JsonApi(
            provider=self.provider_name,
            base_url=self.default_base_url if base_url is None else base_url,
            headers=self.auth_headers(self._key.reveal()),
            secrets=(self._key,),
            timeout=timeout,
            clock=clock,
            client=client,
            transport=transport,
            connections=connections,
        )

    @property
    def description(self) -> str:
        """One line naming the provider, model and server; safe to log."""
        return f"{self.label} model {self.model} at {self.base_url} ({self._auth_note})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def base_url(self) -> str:
        return self._api.base_url

    @property
    def timeout(self) -> float:
        return self._api.timeout

    @property
    def _auth_note(self) -> str:
        return "with an API key" if self._key else "without an API key"

    async def aclose(self) -> None:
        await self._api.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _observed(
        self, request: ModelRequest, call: Callable[[], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await observed(
            self.hooks, provider=self._api.provider, schema_name=request.schema_name, call=call,
            timer=self._timer, model=self.model, request=request,
        )


__all__ = [
    "DEFAULT_CONNECTIONS",
    "DETAIL_LIMIT",
    "NOT_JSON",
    "REFUSED_SHAPE_HINTS",
    "RETRYABLE_STATUSES",
    "HttpOptions",
    "JsonApi",
    "JsonApiProvider",
    "Secret",
    "checked_api_key",
    "decode_json_object",
    "error_for_status",
    "malformed",
    "observed",
    "parse_retry_after",
    "redact",
    "refused_shape",
    "status_kind",
    "token_count",
    "truncation",
    "unusable_reply",
    "usage_from",
]
