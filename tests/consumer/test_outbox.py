"""The outbox publisher and relay against in-memory doubles."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError

from consumer.errors import PublishError
from consumer.outbox import (
    OutboxPublisher,
    PublishedMarks,
    _settled,
    encode_payload,
)
from consumer.relay import OutboxRelay
from tests.consumer.fakes import FakeProducer, FakeStore

OLD = datetime.now(UTC) - timedelta(minutes=5)


def texts(producer: FakeProducer) -> list[str]:
    return [json.loads(value)["text"] for _topic, _key, value in producer.sent]


async def test_relay_sends_only_old_rows_and_keeps_each_session_a_prefix() -> None:
    """Rows older than the grace go out; a session's rows after its first young row wait,
    so a session never has a newer row sent before an older one."""
    store, producer = FakeStore(), FakeProducer()
    store.add_row("a", "m", {"text": "a1"}, created_at=OLD)
    store.add_row("a", "m", {"text": "a2"})  # young: written by a live consumer just now
    store.add_row("a", "m", {"text": "a3"}, created_at=OLD)
    store.add_row("b", "m", {"text": "b1"}, created_at=OLD)
    relay = OutboxRelay(OutboxPublisher(store, producer), store,  # type: ignore[arg-type]
                        interval_s=1, grace_s=60)
    assert await relay.run_once() == 2
    assert texts(producer) == ["a1", "b1"]
    assert await store.outbox_backlog() == 2


async def test_the_relay_takes_no_young_row_into_its_batch() -> None:
    """The relay's fetch is asked for rows older than the grace (judged by the database
    clock), so it never locks a row a live consumer is about to mark, whose mark would wait
    for the relay's sends."""
    fetched: list[list[str]] = []

    class Watched(FakeStore):
        @asynccontextmanager
        async def fetch_unpublished(self, **fetch: Any) -> AsyncIterator[Any]:
            async with super().fetch_unpublished(**fetch) as batch:
                fetched.append([r.payload["text"] for r in batch.rows])
                yield batch

    store, producer = Watched(), FakeProducer()
    store.add_row("crashed", "m", {"text": "old"}, created_at=OLD)
    store.add_row("live", "m", {"text": "young"})
    assert await OutboxPublisher(store, producer).flush_older(  # type: ignore[arg-type]
        older_than=timedelta(seconds=60)
    ) == 1
    assert fetched == [["old"]]
    assert texts(producer) == ["old"]


async def test_flush_session_sends_only_that_session_in_order() -> None:
    """Flushing a session publishes its rows oldest first, keyed by session, and marks them."""
    store, producer = FakeStore(), FakeProducer()
    first = store.add_row("a", "m", {"text": "a1"})
    store.add_row("b", "m", {"text": "b1"})
    second = store.add_row("a", "m", {"text": "a2"})
    published = await OutboxPublisher(store, producer).flush_session("a")  # type: ignore[arg-type]
    assert published == [first, second]
    assert texts(producer) == ["a1", "a2"]
    assert {key for _t, key, _v in producer.sent} == {b"a"}


class FailingProducer(FakeProducer):
    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> object:
        raise KafkaTimeoutError()


async def test_failed_send_leaves_rows_unpublished() -> None:
    """A broker failure raises PublishError and marks nothing published."""
    store = FakeStore()
    store.add_row("a", "m", {"text": "a1"})
    with pytest.raises(PublishError):
        await OutboxPublisher(store, FailingProducer()).flush_session("a")  # type: ignore[arg-type]
    assert await store.outbox_backlog() == 1


def test_payload_encoding_is_compact_utf8_json() -> None:
    """Outbound values are compact JSON with non-ASCII text kept as UTF-8."""
    assert encode_payload({"text": "olá", "n": 1}) == '{"text":"olá","n":1}'.encode()


def test_payload_encoding_matches_the_stored_row() -> None:
    """A row sent straight from the save carries what the stored row holds: a NUL the table
    cannot keep goes out as U+FFFD either way, so a relayed copy equals the first one."""
    assert json.loads(encode_payload({"text": "a\x00b"})) == {"text": "a\ufffdb"}


class GatedMarks:
    """A store whose mark statements wait for the test to let each one finish."""

    def __init__(self) -> None:
        self.statements: list[list[int]] = []
        self.gate = asyncio.Event()
        self.started = asyncio.Event()

    async def mark_published(self, ids: list[int]) -> int:
        self.statements.append(list(ids))
        self.started.set()
        await self.gate.wait()
        return len(ids)


async def test_marks_of_turns_finishing_together_share_a_statement() -> None:
    """While one mark statement is in flight, the marks that arrive meanwhile wait and go out
    together in the next one; every turn returns only once its own rows are marked."""
    store = GatedMarks()
    marks = PublishedMarks(store)  # type: ignore[arg-type]
    first = asyncio.create_task(marks.mark([1, 2]))
    await store.started.wait()
    later = [asyncio.create_task(marks.mark([i])) for i in (3, 4, 5)]
    await asyncio.sleep(0)
    assert not first.done() and not any(t.done() for t in later)
    store.gate.set()
    await asyncio.gather(first, *later)
    assert store.statements == [[1, 2], [3, 4, 5]]


async def test_a_failed_mark_fails_every_turn_that_shared_it() -> None:
    """When the shared mark statement fails, each turn waiting on it gets the error."""

    class FailingMarks:
        async def mark_published(self, ids: list[int]) -> int:
            await asyncio.sleep(0)
            raise ConnectionError("database gone")

    marks = PublishedMarks(FailingMarks())  # type: ignore[arg-type]
    results = await asyncio.gather(marks.mark([1]), marks.mark([2]), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)


# -- the acks of one send, awaited one by one ----------------------------------------------------


def _ended(loop: asyncio.AbstractEventLoop, how: str) -> asyncio.Future[object]:
    future: asyncio.Future[object] = loop.create_future()
    if how == "ok":
        future.set_result(how)
    elif how == "error":
        future.set_exception(KafkaTimeoutError())
    elif how == "cancelled":
        future.cancel()
    return future


@pytest.mark.parametrize(
    "hows",
    [[], ["ok"], ["ok", "ok"], ["error", "ok"], ["ok", "cancelled", "error"],
     ["cancelled", "cancelled"], ["later", "ok", "later"], ["later", "error"]],
)
async def test_settled_gives_what_gather_with_exceptions_gives(hows: list[str]) -> None:
    """Results and exceptions in order, an ack the producer cancelled as its CancelledError,
    acks that end later awaited: the same list ``gather(return_exceptions=True)`` returns."""
    loop = asyncio.get_running_loop()

    def acks() -> list[asyncio.Future[object]]:
        futures = [_ended(loop, how) for how in hows]
        for future in futures:
            if not future.done():
                loop.call_later(0.01, future.set_result, "late")
        return futures

    ours = await _settled(acks())
    theirs = await asyncio.gather(*acks(), return_exceptions=True)
    assert [(type(o), o if not isinstance(o, BaseException) else None) for o in ours] == [
        (type(t), t if not isinstance(t, BaseException) else None) for t in theirs
    ]


async def test_cancelling_the_send_cancels_the_acks_still_pending() -> None:
    """The awaiting turn cancelled (a revoke, a shutdown) stops waiting and cancels every ack
    not yet in, as gather does; an ack already in keeps its result."""
    loop = asyncio.get_running_loop()
    first: asyncio.Future[object] = loop.create_future()
    second: asyncio.Future[object] = loop.create_future()
    done = _ended(loop, "ok")
    waiting = asyncio.create_task(_settled([done, first, second]))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert first.cancelled() and second.cancelled()
    assert done.result() == "ok"


async def test_a_failed_ack_beside_a_good_one_fails_the_send() -> None:
    """One ack failing for a reason a retry may fix makes the send raise PublishError, the
    good one counted published; nothing is marked by the caller."""

    class OneFailing(FakeProducer):
        async def send(self, topic: str, value: bytes, key: bytes | None = None,
                       headers: list[tuple[str, bytes]] | None = None) -> object:
            future = await super().send(topic, value, key=key, headers=headers)
            if len(self.sent) == 2:
                failed: asyncio.Future[object] = asyncio.get_running_loop().create_future()
                failed.set_exception(KafkaTimeoutError())
                return failed
            return future

    store = FakeStore()
    store.add_row("a", "m", {"text": "a1"})
    store.add_row("a", "m", {"text": "a2"})
    publisher = OutboxPublisher(store, OneFailing())  # type: ignore[arg-type]
    async with store.fetch_unpublished() as batch:
        with pytest.raises(PublishError):
            await publisher.send(batch.rows, [row.id for row in batch.rows])
    assert await store.outbox_backlog() == 2


class FailingAcks(FakeProducer):
    """Acks every send but those whose text is in ``fail``, whose ack fails as a partition
    without its leader would (a retry may fix it); ``fail`` is consumed per text."""

    def __init__(self, *fail: str) -> None:
        super().__init__()
        self.fail = list(fail)

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   headers: list[tuple[str, bytes]] | None = None) -> object:
        future = await super().send(topic, value, key=key, headers=headers)
        text = json.loads(value)["text"]
        if text in self.fail:
            self.fail.remove(text)
            failed: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            failed.set_exception(KafkaTimeoutError())
            return failed
        return future


async def test_a_relay_batch_with_a_failed_ack_marks_what_the_broker_took() -> None:
    """One session's failed ack fails the pass, but the other sessions' acknowledged rows are
    marked (they are not sent again on the next pass); the failed session keeps its failed row
    and every row after it, even one acknowledged, and sends them again in order."""
    store = FakeStore()
    for text in ("a1", "b1", "a2", "c1", "b2"):
        store.add_row(text[0], "m", {"text": text}, created_at=OLD)
    producer = FailingAcks("a1")
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    with pytest.raises(PublishError):
        await publisher.flush_older(older_than=timedelta(seconds=60))
    assert texts(producer) == ["a1", "b1", "a2", "c1", "b2"]
    assert {r.payload["text"] for r in store.rows if r.id in store.published} == {
        "b1", "c1", "b2"
    }
    producer.sent.clear()
    assert await publisher.flush_older(older_than=timedelta(seconds=60)) == 2
    assert texts(producer) == ["a1", "a2"]
    assert await store.outbox_backlog() == 0


async def test_flush_session_marks_the_rows_before_a_failed_ack() -> None:
    """A session's rows acknowledged before its first failed ack are marked before the
    PublishError; the failed row and the rows after it stay for the retry."""
    store = FakeStore()
    ids = [store.add_row("a", "m", {"text": text}) for text in ("a1", "a2", "a3")]
    publisher = OutboxPublisher(store, FailingAcks("a2"))  # type: ignore[arg-type]
    with pytest.raises(PublishError):
        await publisher.flush_session("a")
    assert store.published == {ids[0]}
    assert await publisher.flush_session("a") == ids[1:]
    assert await store.outbox_backlog() == 0
