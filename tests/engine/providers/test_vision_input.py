"""Images reach the model through each provider's own vision input: OpenAI-compatible image
content parts, Anthropic image blocks (URL or base64 source)."""

from __future__ import annotations

from engine.providers.anthropic import messages_body
from engine.providers.base import ChatMessage, ImagePart, ModelRequest
from engine.providers.openai import chat_completion_body

IMAGES = [ImagePart(media_type="image/png", url="https://cdn.loja.com/a.png"),
          ImagePart(media_type="image/jpeg", data="aGVsbG8=")]


def _request() -> ModelRequest:
    return ModelRequest(
        schema_name="vision", system="Leia.",
        messages=[ChatMessage(role="user", text="meu pedido", images=IMAGES)],
        json_schema={"type": "object", "properties": {"description": {"type": "string"}}},
    )


def test_openai_sends_the_text_then_one_image_url_part_per_image() -> None:
    """A URL goes as it is, inline data as a data: URL with its media type."""
    body = chat_completion_body(_request(), model="gpt-4o-mini")
    [user] = [m for m in body["messages"] if m["role"] == "user"]
    assert user["content"] == [
        {"type": "text", "text": "meu pedido"},
        {"type": "image_url", "image_url": {"url": "https://cdn.loja.com/a.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,aGVsbG8="}},
    ]


def test_anthropic_sends_image_blocks_before_the_text() -> None:
    """A URL source and a base64 source with its media type, then the text block."""
    body = messages_body(_request(), model="claude", max_tokens=100)
    [user] = [t for t in body["messages"] if t["role"] == "user"]
    assert user["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://cdn.loja.com/a.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                     "data": "aGVsbG8="}},
        {"type": "text", "text": "meu pedido"},
    ]


def test_messages_without_images_are_sent_as_before() -> None:
    """No images: plain string content for OpenAI, one text block for Anthropic."""
    plain = ModelRequest(schema_name="speak", system="s",
                         messages=[ChatMessage(role="user", text="oi")], json_schema={})
    assert [m for m in chat_completion_body(plain, model="m")["messages"]
            if m["role"] == "user"] == [{"role": "user", "content": "oi"}]
    assert messages_body(plain, model="m", max_tokens=10)["messages"][0]["content"] == [
        {"type": "text", "text": "oi"}]
