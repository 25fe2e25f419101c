"""Keeping dead letters in full: records a Kafka topic cannot carry whole.

A record near the broker's size limit cannot be forwarded to the DLQ topic once the dead
letter's headers are added, and an outbox row the broker refuses as too large can never be
sent. Retrying either only jams what waits behind it, and dropping it would lose it, so it is
kept here and the dead letter that does travel names the row. `keep` is idempotent per
`source`: keeping the same record again (a replay after a crash between the keep and the
publish) returns the row it made the first time.

Headers are stored as a jsonb list of `[name, base64 value]` pairs, in their order.
"""

from __future__ import annotations

import base64
from typing import Any

from sqlalchemy import text

from store import jsoncodec
from store.records import DeadLetterRecord

KEEP = text("""
INSERT INTO dead_letters (source, topic, reason, detail, key, value, headers)
VALUES (:source, :topic, :reason, :detail, :key, :value, CAST(:headers AS jsonb))
ON CONFLICT (source) DO UPDATE SET source = EXCLUDED.source
RETURNING id
""")

READ = text("""
SELECT source, topic, reason, detail, key, value, headers FROM dead_letters WHERE id = :id
""")


def _text(value: str) -> str:
    """Text PostgreSQL can store: lone surrogates escaped (jsoncodec rewrites NUL)."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\ufffd")


def keep_parameters(letter: DeadLetterRecord) -> dict[str, Any]:
    """Bind parameters for `KEEP`."""
    return {
        "source": _text(letter.source),
        "topic": _text(letter.topic),
        "reason": _text(letter.reason),
        "detail": _text(letter.detail),
        "key": letter.key,
        "value": letter.value,
        "headers": jsoncodec.dumps(
            [[_text(name), base64.b64encode(value or b"").decode("ascii")]
             for name, value in letter.headers]
        ),
    }


def decode(row: Any) -> DeadLetterRecord:
    """A `READ` row back as the record kept."""
    headers = jsoncodec.loads(row.headers)
    return DeadLetterRecord(
        source=row.source,
        topic=row.topic,
        reason=row.reason,
        detail=row.detail,
        key=bytes(row.key) if row.key is not None else None,
        value=bytes(row.value) if row.value is not None else None,
        headers=[(name, base64.b64decode(value)) for name, value in headers],
    )
