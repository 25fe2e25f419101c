"""The test suite's Apache Kafka formats its storage with a cluster id the storage tool takes.

A URL-safe base64 id may start with ``-``, which the tool's command line reads as an option
(``-t`` then has no value and ``format`` fails): one start in 64 failed that way. Kafka's own
``Uuid.randomUuid`` draws again in that case, and so does ``new_cluster_id``."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.fixtures import kafka_server


def test_an_id_starting_with_a_dash_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=bytes(16))])
    monkeypatch.setattr(kafka_server.uuid, "uuid4", lambda: next(drawn))
    assert kafka_server.new_cluster_id() == "A" * 22


def test_ids_are_22_url_safe_characters_never_led_by_a_dash() -> None:
    ids = {kafka_server.new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)
