"""The chat client's pieces that ``turnflow dev``'s terminal and the inspector's test console
share: the input a channel would write, how inputs go out, which replies a reader keeps, and
which inputs a turn answered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from consumer.devchat.client import ReplyReader, markers, message_input, produce
from consumer.inspect.console import ConsoleReplies, new_console_session


class _Metadata:
    def __init__(self, topic: str, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, 0, offset


class _Producer:
    """Records every send; ``send`` returns a future as aiokafka's does (a batch), while
    ``send_and_wait`` sends one record and waits."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bytes, bytes]] = []

    async def send_and_wait(self, topic: str, *, key: bytes, value: bytes) -> _Metadata:
        self.calls.append(("send_and_wait", topic, key, value))
        return _Metadata(topic, len(self.calls) - 1)

    async def send(self, topic: str, *, key: bytes, value: bytes) -> asyncio.Future[Any]:
        self.calls.append(("send", topic, key, value))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(_Metadata(topic, len(self.calls) - 1))
        return future


def test_a_message_input_is_what_a_channel_writes() -> None:
    value = message_input("s-1", "s-1-m1", "hi <b>")
    assert set(value) == {"session_id", "message", "id", "at"}
    assert (value["session_id"], value["id"], value["message"]) == ("s-1", "s-1-m1", "hi <b>")
    json.dumps(value)  # a record's value


async def test_one_input_waits_and_a_burst_goes_out_in_one_batch_keyed_by_session() -> None:
    producer = _Producer()
    one = await produce(producer, "in", "s-1", [b"a"])
    burst = await produce(producer, "in", "s-1", [b"b", b"c"])
    assert [c[0] for c in producer.calls] == ["send_and_wait", "send", "send"]
    assert {(c[1], c[2]) for c in producer.calls} == {("in", b"s-1")}
    assert one == [("in", 0, 0)] and burst == [("in", 0, 1), ("in", 0, 2)]


def test_a_turn_answers_its_own_input_and_its_bursts_earlier_ones() -> None:
    assert markers({"id": "m3", "burst": [{"id": "m1"}, {"id": "m2"}, "odd", {}]}) == [
        "m3", "m1", "m2"]
    assert markers({"event": "paid", "key": "e1"}) == ["e1"]
    assert markers({"wake": "t@x"}) == []


def test_a_reader_keeps_its_sessions_replies_only() -> None:
    terminal = ReplyReader(consumer=None, topic="out", session_id="dev-1")
    console = ConsoleReplies(consumer=None, topic="out")
    ours = new_console_session()
    assert terminal.wants("dev-1") and not terminal.wants("dev-2") and not terminal.wants(ours)
    assert console.wants(ours) and not console.wants("dev-1") and not console.wants(None)
    assert not console.wants("console-../../x") and not console.wants(7)
