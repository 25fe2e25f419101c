"""The shared HTTP plumbing: status classification, Retry-After, secrets, hooks."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from engine.errors import ProviderError
from engine.providers.base import CallRecord, ModelResponse, ProviderHooks, Usage
from engine.providers.http import (
    Secret,
    decode_json_object,
    error_for_status,
    observed,
    parse_retry_after,
    redact,
    status_kind,
)

NOW = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "fatal"), (401, "fatal"), (403, "fatal"), (404, "fatal"), (413, "fatal"),
     (422, "fatal"), (408, "retryable"), (409, "retryable"), (425, "retryable"),
     (429, "retryable"), (500, "retryable"), (502, "retryable"), (503, "retryable"),
     (529, "retryable")],
)
def test_status_kind(status: int, kind: str) -> None:
    """429, 408/409/425 and every 5xx are retryable; every other 4xx is fatal."""
    assert status_kind(status) == kind


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "Mon, 05 Jan 2026 09:00:30 GMT"}, 30.0),
        ({"retry-after": "Mon, 05 Jan 2026 08:59:00 GMT"}, 0.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "tomorrow-ish"}, None),
        ({}, None),
        ({"retry-after": "1e12"}, 86_400.0),
        ({"retry-after-ms": "1e300"}, 86_400.0),
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, 86_400.0),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    """Retry-After is read as seconds or as an HTTP-date against the given now; ms wins."""
    assert parse_retry_after(httpx.Headers(headers), NOW) == expected


def test_error_for_status_reads_api_message_and_scrubs_key() -> None:
    """A 401 whose body echoes the key yields a fatal error naming the API's message, key masked."""
    key = Secret("sk-live-123456")
    response = httpx.Response(
        401, json={"error": {"type": "invalid_request_error",
                             "message": "Incorrect API key provided: sk-live-123456"}},
    )
    error = error_for_status(response, provider="openai", now=NOW, secrets=(key,))
    assert error.kind == "fatal" and error.status == 401 and error.retry_after is None
    assert "Incorrect API key provided: ***" in str(error)
    assert "sk-live-123456" not in str(error) + repr(error)


def test_error_for_status_flags_context_length() -> None:
    """A 400 about the context window is fatal and says so plainly."""
    response = httpx.Response(400, json={"error": {
        "code": "context_length_exceeded", "message": "This model's maximum context length..."}})
    error = error_for_status(response, provider="openai", now=NOW, secrets=())
    assert error.kind == "fatal"
    assert str(error).startswith("openai: HTTP 400: context length exceeded")


def test_error_for_status_keeps_retry_after_only_when_retryable() -> None:
    """A 503 carries its Retry-After; a 403 with the same header does not."""
    headers = {"retry-after": "12"}
    busy = error_for_status(httpx.Response(503, headers=headers, text="busy"),
                            provider="p", now=NOW, secrets=())
    denied = error_for_status(httpx.Response(403, headers=headers, text="no"),
                              provider="p", now=NOW, secrets=())
    assert (busy.kind, busy.retry_after) == ("retryable", 12.0)
    assert (denied.kind, denied.retry_after) == ("fatal", None)


def test_secret_never_shows_itself() -> None:
    """A Secret's repr and str are masked; reveal() returns the value."""
    secret = Secret("abc-secret")
    assert "abc-secret" not in repr(secret) + str(secret) + f"{secret}"
    assert secret.reveal() == "abc-secret"
    assert redact("key=abc-secret!", (secret,)) == "key=***!"


@pytest.mark.parametrize(
    ("text", "expected"),
    [('{"a": 1}', {"a": 1}), ('```json\n{"a": 1}\n```', {"a": 1}), ("[1, 2]", None),
     ("hello", None), ("", None)],
)
def test_decode_json_object(text: str, expected: dict[str, int] | None) -> None:
    """Only a JSON object counts, with or without a Markdown fence."""
    assert decode_json_object(text) == expected


async def test_observed_reports_success_with_usage_and_duration() -> None:
    """A successful call is reported once, ok, with its usage and the timer's duration."""
    records: list[CallRecord] = []
    ticks = iter([10.0, 10.25])

    response = ModelResponse(text="hi", usage=Usage(input_tokens=3, output_tokens=4))

    async def call() -> ModelResponse:
        return response

    await observed(ProviderHooks([records.append]), provider="p", schema_name="speak",
                   call=call, timer=lambda: next(ticks))
    assert records == [CallRecord(provider="p", schema_name="speak", duration_s=0.25, ok=True,
                                  usage=Usage(input_tokens=3, output_tokens=4),
                                  response=response)]


async def test_observed_reports_failure_kind_and_reraises() -> None:
    """A failed call is reported with its error kind and the error still propagates."""
    records: list[CallRecord] = []

    async def fatal() -> ModelResponse:
        raise ProviderError("nope", kind="fatal")

    async def crash() -> ModelResponse:
        raise RuntimeError("boom")

    hooks = ProviderHooks([records.append])
    with pytest.raises(ProviderError):
        await observed(hooks, provider="p", schema_name="understand", call=fatal)
    with pytest.raises(RuntimeError):
        await observed(hooks, provider="p", schema_name="understand", call=crash)
    assert [(r.ok, r.error_kind, r.error_type) for r in records] == [
        (False, "fatal", "ProviderError"), (False, "retryable", "RuntimeError")]


async def test_failing_hook_does_not_fail_the_call() -> None:
    """A hook that raises is ignored; the response still comes back."""
    def broken(record: CallRecord) -> None:
        raise ValueError("metrics down")

    async def call() -> ModelResponse:
        return ModelResponse(text="ok")

    response = await observed(ProviderHooks([broken]), provider="p", schema_name="speak",
                              call=call)
    assert response.text == "ok"
