"""Images in a question, in the window (the scripted engine double plays the model, with vLLM's verdict on it
as EngineReady.reads_images): a vision model gets the image as an image_url part and the turn keeps its bytes
through a reload; a text-only model refuses it, saying why, and the attach button's tooltip says so first."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image
from PySide6.QtWidgets import QLabel

from app.core.chat.images import image_from_url
from app.engine.scripted import Script, ScriptedEngineDouble
from tests.ui.test_attachments_window import given_files
from tests.ui.test_window import send, wait_ready


def png(path: Path, size: tuple[int, int] = (40, 30)) -> Path:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, "PNG")
    path.write_bytes(out.getvalue())
    return path


def test_an_image_reaches_a_vision_model_and_survives_a_reload(qtbot, make_window, tmp_path: Path) -> None:
    """Bugs caught: an image attached as text (mojibake) or dropped on send; its chip without the pixel size;
    the turn keeping only its text, so a reload or a Regenerate asked without the image."""
    engine = ScriptedEngineDouble([Script(["A red square."])], model_name="tiny-vlm", reads_images=True)
    window = make_window(engine)
    wait_ready(qtbot, window)
    assert "reads text only" not in window.attachments.attach_button.toolTip()
    picture = png(tmp_path / "red.png")
    given_files(window, picture)
    assert len(window.attachments.images) == 1 and window.attachments.attachments == []
    chips = " ".join(label.text() for label in window.attachments.findChildren(QLabel))
    assert "red.png" in chips and "40×30 px" in chips and "B ·" in chips
    send(qtbot, window, "What colour is it?")
    content = engine.requests[-1][-1]["content"]
    assert isinstance(content, list), "the image went as a part, not as text"
    image = image_from_url(next(p["image_url"]["url"] for p in content if p["type"] == "image_url"))
    assert image.data == picture.read_bytes() and (image.width, image.height) == (40, 30)
    assert {"type": "text", "text": "What colour is it?"} in content
    assert window.attachments.images == [], "a send takes the images"
    picture.unlink()  # the history holds the bytes
    stored = next(c for c in window.session.history.conversations() if c.id == window.session.conversation.id)
    assert [i.data for i in stored.turns[-1].images] == [image.data]
    assert stored.turns[-1].user == "What colour is it?", "the shown text stays the question, not base64"


def test_a_text_only_model_refuses_an_image_saying_why(qtbot, make_window, tmp_path: Path) -> None:
    """Bugs caught: an image sent to a text-only model (vLLM then fails the request), refused as "a binary
    file", or the attach button promising images the loaded model can't read."""
    window = make_window(ScriptedEngineDouble(model_name="HuggingFaceTB/SmolLM2-135M-Instruct"))
    wait_ready(qtbot, window)
    tip = window.attachments.attach_button.toolTip()
    assert "SmolLM2-135M-Instruct reads text only" in tip and "vision model" in tip
    given_files(window, png(tmp_path / "photo.png"))
    assert window.attachments.images == [] and window.attachments.attachments == []
    assert window.banner.isVisible()
    text = window.banner.text()
    assert "photo.png was not attached" in text and "SmolLM2-135M-Instruct reads text only" in text
    assert "binary" not in text
