"""Step 2 of a lifecycle turn: images the customer sent are read first, when image understanding
is on.

With ``images.understanding`` on, the message's images go through limits code checks (at most
``max_images`` per message, inline data valid base64 of at most ``max_bytes`` bytes, a listed
media type); each one refused gets an outcome line ``image-refused`` naming the image by its
position and the reason, and the reply is told which could not be read so it can say so. The
accepted ones are read by one model call (``schema_name: "vision"``), sent through the
provider's vision input (OpenAI-compatible image content parts, Anthropic image blocks); what
it read goes into the speak prompt. It costs 2 credits when it read something. If the call
fails the turn goes on without it (``images-unread``).

With image understanding off (or no ``images`` settings), images are ignored: an outcome line
``images-ignored`` records how many, and nothing else changes. Images are not read for a turn
the plan gates, a session handed over, or a replayed message.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from engine.errors import MockExhausted
from engine.lifecycle import turn as lifecycle_turn
from engine.providers.base import ChatMessage, ImagePart, ModelRequest
from engine.request import ImageInput

if TYPE_CHECKING:
    from engine.lifecycle.settings import ImageSettings
    from engine.state import TurnState

VISION_SCHEMA = "vision"
SYSTEM = (
    "You read the images a customer sent to a customer-service agent. Describe, in the "
    "customer's language, what each image shows that matters for helping them (products, "
    "order numbers, error messages, documents). Do not guess what is not visible."
)


def screen(
    images: Sequence[ImageInput | dict[str, Any]], settings: ImageSettings
) -> tuple[list[ImagePart], list[str]]:
    """The images that may be read, and why each other one may not (by its position).

    Never raises: an entry that is not a valid image is refused with the first problem found
    (its field name, never its content)."""
    accepted: list[ImagePart] = []
    refused: list[str] = []
    for position, entry in enumerate(images, start=1):
        try:
            image = entry if isinstance(entry, ImageInput) else ImageInput.model_validate(entry)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "image"
            refused.append(f"image {position}: {where}: {error['msg']}")
            continue
        problem = _problem(image, settings)
        if problem is None and len(accepted) >= settings.max_images:
            problem = f"more than {settings.max_images} images in one message"
        if problem is not None:
            refused.append(f"image {position}: {problem}")
            continue
        accepted.append(ImagePart(media_type=image.media_type, url=image.url, data=image.data))
    return accepted, refused


def _problem(image: ImageInput, settings: ImageSettings) -> str | None:
    if image.media_type not in settings.media_types:
        return f"media type {image.media_type!r} is not one of {', '.join(settings.media_types)}"
    if image.data is None:
        return None
    if len(image.data) > (settings.max_bytes * 4) // 3 + 4:  # before decoding anything large
        return f"larger than {settings.max_bytes:,} bytes"
    try:
        size = len(base64.b64decode(image.data, validate=True))
    except (binascii.Error, ValueError):
        return "data is not valid base64"
    if size > settings.max_bytes:
        return f"larger than {settings.max_bytes:,} bytes"
    if size == 0:
        return "data is empty"
    return None


async def read(state: TurnState) -> None:
    """Read this message's images before anything else of the turn (or record them ignored)."""
    request = state.request
    turn = lifecycle_turn.of(state)
    if turn is None or not request.images or state.ignored or turn.gated:
        return
    if turn.memory.handoff is not None or request.input_id in state.session.inputs:
        return
    settings = turn.settings.images
    if settings is None or not settings.understanding:
        state.outcome("images-ignored", detail=f"{len(request.images)} image(s)")
        return
    accepted, refused = screen(request.images, settings)
    for reason in refused:
        state.outcome("image-refused", detail=reason)
    turn.image_notes = [f"Could not read {reason}." for reason in refused]
    provider = state.config.provider
    if not accepted or provider is None:
        return
    call = ModelRequest(
        schema_name=VISION_SCHEMA,
        system=SYSTEM,
        messages=[ChatMessage(role="user", text=request.message or "", images=accepted)],
        json_schema={"type": "object", "properties": {"description": {"type": "string"}},
                     "required": ["description"], "additionalProperties": False},
        meta={"call": VISION_SCHEMA, "images": len(accepted)},
    )
    state.llm_calls += 1
    try:
        response = await provider.generate(call)
    except MockExhausted:
        raise
    except Exception as exc:  # the turn goes on without what the images show
        state.outcome("images-unread", detail=type(exc).__name__, llm_calls=1)
        return
    description = _description(response.json, response.text)
    if not description:
        state.outcome("images-unread", detail="empty reading", llm_calls=1)
        return
    state.outcome("images-read", detail=f"{len(accepted)} image(s)", llm_calls=1)
    turn.image_reading = description
    turn.usage.images_read = True


def _description(value: Any, text: str | None) -> str:
    if isinstance(value, dict) and isinstance(value.get("description"), str):
        return str(value["description"]).strip()
    return (text or "").strip() if value is None else ""


def prompt_block(image_reading: str | None, notes: list[str]) -> str | None:
    """What the images showed, and which could not be read, for the speak prompt."""
    if image_reading is None and not notes:
        return None
    body = [image_reading] if image_reading else []
    body += notes
    return "## Images the customer sent\n" + "\n".join(body)
