"""image_url parts on the local API (the official client, real HTTP on 127.0.0.1, the scripted engine playing
the model with vLLM's verdict as EngineReady.reads_images): data: URLs reach a vision model as typed images;
a text-only model, an http URL and a broken image are each a 400 naming the field."""

from __future__ import annotations

import base64
import io
from typing import Any

import openai
import pytest
from PIL import Image

from app.core.chat.images import image_from_url
from app.engine.scripted import Script
from tests.support.scripted_api import scripted_api


def png_url(size: tuple[int, int] = (8, 6)) -> str:
    out = io.BytesIO()
    Image.new("RGB", size, (0, 128, 255)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def question(url: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def refusal(reads_images: bool, url: str) -> dict[str, Any]:
    with scripted_api(reads_images=reads_images) as api:
        with pytest.raises(openai.BadRequestError) as caught:
            api.client(max_retries=0).chat.completions.create(model="any", messages=question(url))  # type: ignore[arg-type]
        assert api.engine.requests == [], "refused before the engine"
    return caught.value.body  # type: ignore[return-value]


def test_a_vision_model_gets_the_image_of_a_data_url() -> None:
    """Bugs caught: image_url parts refused for a model that reads them, or the text sent without the image."""
    with scripted_api([Script(["A blue rectangle."])], reads_images=True) as api:
        reply = api.client(max_retries=0).chat.completions.create(model="any", messages=question(png_url()))  # type: ignore[arg-type]
        assert reply.choices[0].message.content == "A blue rectangle."
        content = api.engine.requests[-1][-1]["content"]
    image = image_from_url(next(p["image_url"]["url"] for p in content if p["type"] == "image_url"))
    assert (image.mime, image.width, image.height) == ("image/png", 8, 6)
    assert {"type": "text", "text": "What is this?"} in content


def test_a_text_only_model_refuses_images_naming_the_field() -> None:
    """Bug caught: an image passed to a text-only model (vLLM fails the request with a 500) or silently dropped,
    so the client believes the model saw it."""
    error = refusal(False, png_url())
    assert error["param"] == "messages[0].content" and error["code"] == "images_not_supported"
    assert "reads text only" in error["message"]


@pytest.mark.parametrize("url,says", [("https://example.com/cat.png", "only data: URLs"),
                                      ("data:image/png;base64,bm90IGFuIGltYWdl", "not an image"),
                                      ("data:image/png;base64,@@@", "base64")])
def test_an_unreadable_image_url_is_a_400_naming_the_field(url: str, says: str) -> None:
    """Bugs caught: Nalar fetching a URL it was given (it fetches nothing), or a broken image reaching vLLM."""
    error = refusal(True, url)
    assert error["param"].startswith("messages[0].content"), error
    assert says in error["message"]
