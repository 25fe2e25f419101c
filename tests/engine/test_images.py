"""The image limits judge any entry a producer sends: accepted, or refused with a reason that
names the image's position and never its content."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import TurnRequest, TurnRequestError
from engine.lifecycle.images import screen
from engine.lifecycle.settings import ImageSettings

_VALUES = st.none() | st.booleans() | st.integers() | st.text(max_size=30)
_ENTRY = st.dictionaries(st.sampled_from(["media_type", "url", "data", "x"]), _VALUES, max_size=4)


@given(entries=st.lists(_ENTRY, max_size=8), limit=st.integers(min_value=1, max_value=10))
@settings(max_examples=300, deadline=None)
def test_property_any_entries_are_accepted_or_refused_never_raised(
    entries: list[dict[str, Any]], limit: int
) -> None:
    """Every entry is accounted for exactly once, refusals name positions, limits hold."""
    accepted, refused = screen(entries, ImageSettings(understanding=True, max_images=limit))
    assert len(accepted) + len(refused) == len(entries) and len(accepted) <= limit
    for reason in refused:
        assert reason.startswith("image ")
        for entry in entries:
            data = entry.get("data")
            if isinstance(data, str) and len(data) > 12:
                assert data not in reason


@given(images=st.lists(_ENTRY | _VALUES, max_size=5), with_message=st.booleans())
@settings(max_examples=200, deadline=None)
def test_property_a_request_with_any_images_is_parsed_or_refused_with_a_reason(
    images: list[Any], with_message: bool
) -> None:
    """Any images value in a turn request: a valid request (each image judged later) or a
    TurnRequestError naming the problem, never another exception."""
    body: dict[str, Any] = {"session_id": "s1", "images": images}
    body.update({"message": "oi"} if with_message else {"wake": "k"})
    try:
        request = TurnRequest.parse(body)
    except TurnRequestError as exc:
        assert str(exc).startswith("invalid turn request")
        return
    assert with_message or not images
    assert len(request.images) == len(images)
