"""Lifecycle step 2, images: read first through the vision input when image understanding is on
(+2 credits), ignored when off, with size, count and type limits refused clearly."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from engine import Agent, FakeClock, ModelResponse, ProviderError
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    conversation,
    lifecycle_agent,
    message,
    said,
)
from tests.scenarios.support import codes

PHOTO = {"media_type": "image/png", "url": "https://cdn.loja.com/foto.png"}
ON = {"images": {"understanding": True}}


def inline(size: int, media_type: str = "image/jpeg") -> dict[str, Any]:
    """An inline image of ``size`` bytes."""
    return {"media_type": media_type, "data": base64.b64encode(b"\xff" * size).decode()}


def read(text: str) -> dict[str, Any]:
    """The vision call's answer."""
    return {"description": text}


async def test_with_understanding_off_images_are_ignored() -> None:
    """No vision call, an images-ignored line, the reply as usual, no image credits."""
    agent, provider = lifecycle_agent([said("Oi.")], {})
    result = await agent.turn(message("veja", "m1", images=[PHOTO]))
    assert [c.schema_name for c in provider.calls] == ["speak"]
    assert "images-ignored" in codes(result) and result.credits == 1
    assert "## Images" not in provider.calls[0].system


async def test_images_are_read_first_and_what_was_read_feeds_the_reply() -> None:
    """One vision call carrying the images, then the speak call with the reading; 1 + 2
    credits; two model calls."""
    script = [read("Um tênis azul com a sola descolada."), said("Sinto muito pelo tênis!")]
    agent, provider = lifecycle_agent(script, ON)
    result = await agent.turn(message("olha isso", "m1", images=[PHOTO, inline(10)]))
    vision, speak = provider.calls
    assert vision.schema_name == "vision"
    [user] = vision.messages
    assert user.text == "olha isso" and [i.media_type for i in user.images] == [
        "image/png", "image/jpeg"]
    assert "## Images the customer sent\nUm tênis azul com a sola descolada." in speak.system
    assert result.credits == 3 and result.llm_calls == 2 and "images-read" in codes(result)


async def test_limits_refuse_images_by_position_and_tell_the_reply() -> None:
    """Too many, too large, a wrong type, bad base64 and a malformed entry are refused with
    reasons naming the image; only the valid ones are read."""
    images = [PHOTO, inline(200_001), inline(5, "application/pdf"),
              {"media_type": "image/png", "data": "%%%"}, {"url": "https://x.org/a.png"},
              PHOTO, PHOTO]
    settings = {"images": {"understanding": True, "max_images": 2, "max_bytes": 200_000}}
    agent, provider = lifecycle_agent([read("Duas fotos iguais."), said("Ok.")], settings)
    result = await agent.turn(message("fotos", "m1", images=images))
    refused = [o.detail for o in result.outcomes if o.code == "image-refused"]
    assert refused == [
        "image 2: larger than 200,000 bytes",
        "image 3: media type 'application/pdf' is not one of image/jpeg, image/png, "
        "image/gif, image/webp",
        "image 4: data is not valid base64",
        "image 5: media_type: Field required",
        "image 7: more than 2 images in one message",
    ]
    assert len(provider.calls[0].messages[0].images) == 2
    assert "Could not read image 2: larger than 200,000 bytes." in provider.calls[1].system


async def test_no_readable_image_means_no_vision_call_and_no_image_credits() -> None:
    """Every image refused: no vision call, the refusal reaches the reply, 1 credit."""
    agent, provider = lifecycle_agent([said("Não consegui abrir a imagem.")], ON)
    result = await agent.turn(message("foto", "m1", images=[inline(5, "image/tiff")]))
    assert [c.schema_name for c in provider.calls] == ["speak"]
    assert result.credits == 1 and "Could not read image 1" in provider.calls[0].system


async def test_a_failed_vision_call_leaves_the_turn_to_go_on_unbilled_for_images() -> None:
    """The vision call fails: images-unread, the reply still comes, no +2."""
    agent, _ = lifecycle_agent([ProviderError("down", kind="retryable"), said("Oi!")], ON)
    result = await agent.turn(message("foto", "m1", images=[PHOTO]))
    assert "images-unread" in codes(result) and result.credits == 1
    assert [m.text for m in result.messages] == ["Oi!"]


async def test_a_gated_or_replayed_message_reads_no_image() -> None:
    """The plan gate comes first, and a repeated message id is not read again."""
    agent, provider = lifecycle_agent([], {**ON, "plan_check": lambda session: False})
    await agent.turn(message("foto", "m1", images=[PHOTO]))
    assert provider.calls == []
    agent, provider = lifecycle_agent([read("Foto."), said("Ok.")], ON)
    first = await agent.turn(message("foto", "m1", images=[PHOTO]))
    again = await agent.turn(message("foto", "m1", first, images=[PHOTO]))
    assert len(provider.calls) == 2 and "duplicate-input" in codes(again)


async def test_images_without_a_message_are_a_clear_request_error() -> None:
    """Images ride on messages only; elsewhere the request is refused naming why."""
    from engine import TurnRequestError

    agent, _ = lifecycle_agent([], ON)
    try:
        await agent.turn({"session_id": "s1", "event": "x", "key": "k", "images": [PHOTO]})
    except TurnRequestError as exc:
        assert "images come only with a message" in str(exc)
    else:
        raise AssertionError("an event with images was accepted")


async def test_many_conversations_each_read_only_their_own_images() -> None:
    """Twenty conversations with different images at once: each vision call carries only its
    conversation's image, each reply reads only its own reading."""

    class Vision:
        def __init__(self) -> None:
            self.vision: list[tuple[str, list[str]]] = []

        async def generate(self, request: Any) -> ModelResponse:
            await asyncio.sleep(0)
            user = request.messages[-1]
            if request.schema_name == "vision":
                self.vision.append((user.text, [i.url for i in user.images]))
                return ModelResponse(json={"description": f"foto de {user.images[0].url}"})
            reading = request.system.split("## Images the customer sent\n")[1].split("\n")[0]
            return ModelResponse(json={"message": f"{user.text}: {reading}"})

    provider = Vision()
    agent = Agent(name="Ana", provider=provider, clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle=ON)
    ids = [f"s{i}" for i in range(20)]
    results = await asyncio.gather(*(
        agent.turn(conversation(sid, sid, f"{sid}-m1", images=[
            {"media_type": "image/png", "url": f"https://cdn.loja.com/{sid}.png"}]))
        for sid in ids))
    assert sorted(provider.vision) == sorted(
        (sid, [f"https://cdn.loja.com/{sid}.png"]) for sid in ids)
    for sid, result in zip(ids, results, strict=True):
        assert [m.text for m in result.messages] == [
            f"{sid}: foto de https://cdn.loja.com/{sid}.png"]
        assert result.credits == 3
