"""The ledger's checks on hand-made topics and turn logs: each one catches its own fault."""

from __future__ import annotations

from typing import Any

from tests.faults.ledger import (
    Ledger,
    TurnLog,
    TurnRow,
    applied_exactly_once,
    check_all,
    every_reply_sent,
    in_session_order,
    keys_owned_by_one_session,
    same_key_same_record,
    saved_before_sent,
)

INPUTS = [{"session_id": "s", "id": "a"}, {"session_id": "s", "id": "b"}]


def _row(version: int, input_id: str, *texts: str, offset: int | None = None,
         duplicate: bool = False) -> TurnRow:
    return TurnRow(
        session_id="s",
        version=version,
        input_id=input_id,
        outcomes=("duplicate-input",) if duplicate else ("said",),
        messages=tuple({"key": f"k{version}.{i}", "text": t} for i, t in enumerate(texts)),
        schedule=(),
        source=("in", 0, version if offset is None else offset),
    )


def _sent(version: int, index: int, text: str) -> dict[str, Any]:
    return {"session_id": "s", "key": f"k{version}.{index}", "text": text, "version": version}


def _ledger(*messages: dict[str, Any]) -> Ledger:
    ledger = Ledger("unused:9092", messages_topic="m", schedule_topic="t")
    ledger.messages.extend(messages)
    return ledger


LOG = TurnLog([_row(1, "a", "1:a"), _row(2, "b", "2:b")])


def test_a_faithful_topic_passes_every_check() -> None:
    """Both replies sent once, in order, as saved: no problem is reported."""
    assert check_all(LOG, _ledger(_sent(1, 0, "1:a"), _sent(2, 0, "2:b")), INPUTS) == []


def test_an_input_applied_twice_or_never_is_reported() -> None:
    """A second applying turn for one input and a missing one are both problems; a turn the
    engine marked duplicate-input does not count as applied."""
    twice = TurnLog([_row(1, "a", "1:a"), _row(2, "a", "2:a")])
    assert len(applied_exactly_once(twice, INPUTS)) == 2  # a twice, b never
    with_duplicate = TurnLog([*LOG.rows, _row(3, "b", offset=7, duplicate=True)])
    assert applied_exactly_once(with_duplicate, INPUTS) == []


def test_one_source_record_in_the_log_twice_is_reported() -> None:
    """Two turn-log rows from the same topic, partition and offset are a double apply."""
    log = TurnLog([_row(1, "a", "1:a", offset=5), _row(2, "b", "2:b", offset=5)])
    assert applied_exactly_once(log, INPUTS) == ["source record ('in', 0, 5) in the log 2 times"]


def test_a_saved_reply_missing_from_the_topic_is_reported() -> None:
    """A reply the log holds but the topic never got is lost."""
    assert every_reply_sent(LOG, _ledger(_sent(1, 0, "1:a"))) == [
        "reply ('s', 'k2.0') saved but never published"
    ]


def test_a_published_reply_the_log_does_not_hold_is_reported() -> None:
    """A reply on the topic with no saved turn, or differing from it, broke save-then-send."""
    unsaved = _ledger(_sent(1, 0, "1:a"), _sent(2, 0, "2:b"), _sent(3, 0, "3:c"))
    assert saved_before_sent(LOG, unsaved) == ["reply ('s', 'k3.0') published, not in the log"]
    changed = _ledger(_sent(1, 0, "1:a"), _sent(2, 0, "2:x"))
    assert saved_before_sent(LOG, changed) == ["reply ('s', 'k2.0') differs from the log"]


def test_a_key_sent_twice_with_different_contents_is_reported() -> None:
    """Repeats are fine only when identical: a delivery worker keeps the first copy."""
    assert same_key_same_record(_ledger(_sent(1, 0, "1:a"), _sent(1, 0, "1:a"))) == []
    assert len(same_key_same_record(_ledger(_sent(1, 0, "1:a"), _sent(1, 0, "1:z")))) == 1


def test_replies_out_of_turn_log_order_are_reported() -> None:
    """A newer turn's reply ahead of an older one's is out of order; a late repeat is not."""
    assert len(in_session_order(LOG, _ledger(_sent(2, 0, "2:b"), _sent(1, 0, "1:a")))) == 1
    repeat = _ledger(_sent(1, 0, "1:a"), _sent(2, 0, "2:b"), _sent(1, 0, "1:a"))
    assert in_session_order(LOG, repeat) == []


def test_a_key_published_for_two_sessions_is_caught() -> None:
    """The same reply key under two sessions is reported: a delivery worker deduping on the
    key would drop the second customer's reply."""
    other = {**_sent(1, 0, "1:a"), "session_id": "t"}
    assert keys_owned_by_one_session(_ledger(_sent(1, 0, "1:a"), _sent(1, 0, "1:a"))) == []
    assert keys_owned_by_one_session(_ledger(_sent(1, 0, "1:a"), other)) == [
        "messages key 'k1.0' sent for s and t"
    ]
