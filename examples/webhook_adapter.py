"""A channel adapter example: an HTTP webhook in, ``inbound.turns`` out.

Run it next to the service (``turnflow dev`` prints the broker address to use)::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/webhook_adapter.py --port 8081
    curl -s localhost:8081/messages -d '{"session_id": "s1", "text": "hi", "id": "m1"}'
    curl -s localhost:8081/events -d '{"session_id": "s1", "event": "paid", "key": "pay-1"}'

``POST /messages`` takes ``{"session_id", "text", "id"?, "at"?}``; ``POST /events`` takes
``{"session_id", "event", "payload"?, "key"}``. Each becomes one record on the inbound topic,
keyed by the session id so one conversation stays in one partition, in order. The reply is
``202`` only after the broker acknowledged the record: a channel that retries on anything else
loses nothing, and a retried message carries the same ``id``, which the engine drops as a
duplicate.

No web framework: the port is served by ``consumer.webserver.server``, the bounded server the
service's own ports use, so a slow or hostile client meets the same limits there (a deadline on
the request head, capped headers, a capped body, a capped number of connections). The point
here is the shape of the records.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer

from consumer.webserver.server import BoundedHttpServer, HttpError, HttpLimits, Request, Response

MAX_BODY = 64 * 1024


class BadRequest(Exception):
    """The webhook body is not a message or event we can forward."""


def message_record(body: dict[str, Any]) -> dict[str, Any]:
    """The ``inbound.turns`` value for a customer message."""
    session_id, text = body.get("session_id"), body.get("text", body.get("message"))
    if not isinstance(session_id, str) or not session_id:
        raise BadRequest("session_id must be a non-empty string")
    if not isinstance(text, str):
        raise BadRequest("text must be a string")
    record: dict[str, Any] = {"session_id": session_id, "message": text}
    if isinstance(body.get("id"), str):
        record["id"] = body["id"]  # the channel's message id: replays are dropped by id
    record["at"] = body.get("at") or datetime.now(UTC).isoformat()
    return record


def event_record(body: dict[str, Any]) -> dict[str, Any]:
    """The ``inbound.turns`` value for an event (a payment, a booking made elsewhere...)."""
    session_id, event, key = body.get("session_id"), body.get("event"), body.get("key")
    if not isinstance(session_id, str) or not session_id:
        raise BadRequest("session_id must be a non-empty string")
    if not isinstance(event, str) or not event:
        raise BadRequest("event must be a non-empty string")
    if not isinstance(key, str) or not key:
        raise BadRequest("key must be a non-empty string (it makes the event idempotent)")
    payload = body.get("payload") or {}
    if not isinstance(payload, dict):
        raise BadRequest("payload must be an object")
    return {"session_id": session_id, "event": event, "payload": payload, "key": key}


ROUTES = {"/messages": message_record, "/events": event_record}


class WebhookAdapter:
    """Forwards each POST to the inbound topic; ``server()`` serves it on a bounded port."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic

    def server(self, host: str, port: int) -> BoundedHttpServer:
        """The (unstarted) HTTP server of this adapter on ``host:port``."""
        return BoundedHttpServer(
            self.handle, host=host, port=port,
            limits=HttpLimits(max_body_bytes=MAX_BODY), version="HTTP/1.1",
        )

    async def handle(self, request: Request) -> Response:
        status, answer = await self._answer(request)
        return Response(status, json.dumps(answer).encode(), "application/json")

    async def _answer(self, request: Request) -> tuple[int, dict[str, Any]]:
        if request.method != "POST":
            return 405, {"error": "POST only"}
        build = ROUTES.get(request.path)
        if build is None:
            return 404, {"error": f"no route {request.path}; use {sorted(ROUTES)}"}
        try:
            raw = await request.body()
        except HttpError as exc:
            return exc.status, {"error": exc.text}
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise BadRequest("body must be a JSON object")
            record = build(body)
        except (ValueError, BadRequest) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
            return 400, {"error": str(exc)}
        # send_and_wait returns once the broker acknowledged: only then do we answer 202.
        await self.producer.send_and_wait(
            self.topic,
            key=record["session_id"].encode(),
            value=json.dumps(record).encode(),
        )
        return 202, {"queued": record}


async def serve(host: str, port: int, bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        server = await WebhookAdapter(producer, topic).server(host, port).start()
        print(f"webhook adapter on http://{host}:{server.port} -> {topic} at {bootstrap}",
              flush=True)
        try:
            await asyncio.Event().wait()  # until interrupted
        finally:
            await server.stop()
    finally:
        await producer.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    parser.add_argument(
        "--topic", default=os.environ.get("INBOUND_TOPIC", "inbound.turns")
    )
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.host, args.port, args.bootstrap, args.topic))
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port: one line saying what to do, not a traceback
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        raise SystemExit(
            f"webhook adapter: cannot listen on {args.host}:{args.port}: "
            f"{exc.strerror or exc}; stop the process using it or pass another --port"
        ) from None


if __name__ == "__main__":
    main()
