"""Keeping dead letters in full: records a Kafka topic cannot carry whole.

A record near the broker's size limit cannot be forwarded to the DLQ topic once the dead
letter's headers are added, and an outbox row the broker refuses as too large can never be
sent. Retrying either only jams what waits behind it, and dropping it would lose it, so it is
kept here and the dead letter that does travel names the row. `keep` is idempotent per
`source`: keeping the same record again (a replay after a crash between the keep and the
publish) returns the row it made the first time. Kept records, and the sources of every record
sent to the DLQ, are deleted past their retention (`DEAD_LETTER_RETENTION_DAYS`, by the relay
and `turnflow prune`), the oldest first.

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

# Retention: the oldest rows first, by id (identity order is insertion order), at most
# ``:limit`` read per statement whether or not they expired, so no pass scans the table.
PRUNE_KEPT = text("""
DELETE FROM dead_letters WHERE id IN (
    SELECT id FROM (SELECT id, created_at FROM dead_letters ORDER BY id LIMIT :limit) AS oldest
    WHERE created_at < now() - make_interval(secs => :older_than_s)
)
""")

PRUNE_SOURCES = text("""
DELETE FROM dead_lettered_sources WHERE id IN (
    SELECT id FROM (
        SELECT id, created_at FROM dead_lettered_sources ORDER BY id LIMIT :limit
    ) AS oldest
    WHERE created_at < now() - make_interval(secs => :older_than_s)
)
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
