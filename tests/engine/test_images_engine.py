"""Images on the engine's side: typed across the pipe, placed in the chat template, kept or dropped with their
turns, refused for a text-only model, and vLLM's own verdict on which models read them."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
from PIL import Image

from app.core.chat.images import ImagePart, image_part, with_images
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineReady
from app.engine.local.reply_prompt import image_prompt, kept_images
from app.engine.process import process_protocol as protocol
from app.engine.requests import MessageSpec
from tests.conftest import require_embedded_model
from tests.support.tiny_vision_model import build_tiny_vlm


def picture(colour: tuple[int, int, int]) -> ImagePart:
    out = io.BytesIO()
    Image.new("RGB", (6, 4), colour).save(out, "PNG")
    return image_part(out.getvalue())  # no name: a data URL carries none


RED, BLUE = picture((255, 0, 0)), picture((0, 0, 255))
VISION = EngineReady("tiny-vlm", "auto", 1024, 4096, 4.0, 1.0, reads_images=True)
TEXT_ONLY = EngineReady("SmolLM2-135M-Instruct", "auto", 1024, 4096, 4.0, 1.0)


def test_an_image_crosses_the_pipe_as_typed_bytes() -> None:
    """Bugs caught: the image dropped by MessageSpec (the child sees text only), or sent as a dict/base64 text
    that the child must parse again."""
    message = {"role": "user", "content": with_images("Which colour?", [RED, BLUE])}
    spec = MessageSpec.from_openai(message)
    assert spec.content == "Which colour?" and spec.images == (RED, BLUE)
    sent = pickle.loads(pickle.dumps(protocol.Generate("r1", (spec,), sampling=None)))  # type: ignore[arg-type]
    assert sent.messages[0].images[1].data == BLUE.data
    assert MessageSpec.from_openai(sent.messages[0].as_openai()) == spec


def test_the_template_gets_a_placeholder_per_image_and_trimming_drops_their_images() -> None:
    """Bugs caught: images sent for turns the trimming dropped (vLLM then refuses: more images than
    placeholders), or placed in the wrong order."""
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": with_images("first", [RED])},
                {"role": "assistant", "content": "red"},
                {"role": "user", "content": with_images("second", [BLUE])}]
    chat, images = image_prompt(messages, VISION)
    assert chat[1]["content"] == [{"type": "image"}, {"type": "text", "text": "first"}]
    assert chat[0] == messages[0] and chat[2] == messages[2]
    assert kept_images(chat, images, dropped=0) == [RED, BLUE]
    assert kept_images(chat, images, dropped=2) == [BLUE]


def test_a_text_only_engine_refuses_images_naming_the_model() -> None:
    """Bug caught: the images silently dropped for a text-only model, which then answers as if it had seen them."""
    with pytest.raises(EngineFailure) as refused:
        image_prompt([{"role": "user", "content": with_images("what?", [RED])}], TEXT_ONLY)
    assert refused.value.kind == FailureKind.BAD_MESSAGES
    assert "SmolLM2-135M-Instruct reads text only" in refused.value.message
    assert image_prompt([{"role": "user", "content": "hi"}], TEXT_ONLY)[1] == [()]


def test_vllm_decides_which_models_read_images(tmp_path: Path) -> None:
    """Bug caught: a copied list of vision architectures going stale, or the flag read from the wrong config:
    vLLM's ModelConfig (its registry) must call the tiny Idefics3 multimodal and SmolLM2 text-only."""
    from vllm.config import ModelConfig

    from app.engine.local.engine_start import reads_images

    vlm = build_tiny_vlm(tmp_path / "tiny-vlm", require_embedded_model())
    assert reads_images(ModelConfig(model=str(vlm), max_model_len=1024)) is True
    assert reads_images(ModelConfig(model=str(require_embedded_model()), max_model_len=1024)) is False


def test_a_broken_image_is_a_failure_of_the_reply_not_of_the_window() -> None:
    """Bug caught: a malformed image part raising out of EngineProcess.generate (a crash in the window's loop)
    instead of ending the reply with an error it shows."""
    from app.engine.process.engine_process import _generate_message

    broken = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    with pytest.raises(EngineFailure) as refused:
        _generate_message("r", broken, None, False, None, None, None)  # type: ignore[arg-type]
    assert refused.value.kind == FailureKind.BAD_MESSAGES and "not an image" in refused.value.message
