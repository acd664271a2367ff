"""Files in a question, in the window (the scripted engine double answers): a file dropped or pasted on the
prompt is attached with its token count, its text reaches the model, and one too long for the context is
refused before anything is sent."""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QMimeData, QUrl
from PySide6.QtWidgets import QLabel, QWidget

from app.core.chat import attachments
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.scripted import Script, ScriptedEngineDouble
from tests.support.pdfs import text_pdf
from tests.ui.test_window import send, wait_ready


def given_files(window, *paths: Path) -> None:
    """As a drop or a paste delivers them: file URLs in the MIME data."""
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    assert window.prompt.canInsertFromMimeData(data)
    window.prompt.insertFromMimeData(data)


def test_a_dropped_pdf_reaches_the_model_and_the_turn_keeps_its_text(qtbot, make_window, tmp_path: Path,
                                                                     monkeypatch) -> None:
    """Bugs caught: a question couldn't carry a file; a dropped file's path was typed into the prompt; the
    turn kept a path, so a moved file broke a reload or an export; a send while the PDF was still being read
    went without it."""
    engine = ScriptedEngineDouble([Script(["<think>read it</think>", "It says one."])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    pdf = text_pdf(tmp_path / "paper.pdf", ["The integral equals one."])
    held = threading.Event()  # the PDF's reading waits for it, so the send below surely comes first
    read = attachments.pdf_text

    def held_back(data: bytes, cancellation=None):  # type: ignore[no-untyped-def]
        assert held.wait(60), "hang guard"
        return read(data, cancellation)

    monkeypatch.setattr(attachments, "pdf_text", held_back)
    try:
        given_files(window, pdf)
        assert window.prompt.toPlainText() == ""
        window.prompt.setPlainText("Too soon?")
        window.controls.send_button.click()  # the PDF is read off the GUI thread: a send waits for it
        qtbot.waitUntil(lambda: "paper.pdf is still being read" in window.banner.text(), timeout=10_000)
        assert engine.requests == [] and window.prompt.toPlainText() == "Too soon?"
    finally:
        held.set()
    window.prompt.clear()
    qtbot.waitUntil(lambda: len(window.attachments.attachments) == 1, timeout=30_000)
    assert window.attachments.findChildren(QWidget, "AttachmentChip")
    label_text = " ".join(label.text() for label in window.attachments.findChildren(QLabel))
    assert "paper.pdf" in label_text and "tokens" in label_text and "≈" not in label_text  # the model's tokenizer
    send(qtbot, window, "What does the paper say?")
    user = engine.requests[-1][-1]["content"]
    assert '<file name="paper.pdf">' in user and "The integral equals one." in user
    assert user.endswith("What does the paper say?")
    assert "The integral equals one." in window.session.conversation.turns[-1].user
    assert window.attachments.attachments == [], "a send takes the files"
    pdf.unlink()  # the history holds the text itself: a reload still has it with the file gone
    stored = next(c for c in window.session.history.conversations() if c.id == window.session.conversation.id)
    assert "The integral equals one." in stored.turns[-1].user


def test_the_models_tokenizer_is_read_off_the_gui_thread_once_the_engine_is_ready(qtbot, make_window,
                                                                                monkeypatch) -> None:
    """Bug caught: the first send read tokenizer.json on the GUI thread to count the conversation, freezing the
    window 0.1-1 s just as the first answer began to stream."""
    from app.core.models import token_count

    first_read_on: list[str] = []
    original = token_count._tokenizer

    def read(path: Path):  # type: ignore[no-untyped-def]
        first_read_on.append(threading.current_thread().name)
        return original(path)

    monkeypatch.setattr(token_count, "_tokenizer", read)
    token_count.forget_counts()
    window = make_window(ScriptedEngineDouble([Script(["an answer"])]))
    wait_ready(qtbot, window)
    qtbot.waitUntil(lambda: bool(first_read_on), timeout=10_000)
    assert first_read_on[0].startswith("nalar-op: Reading the model's tokenizer")


def test_files_too_long_for_the_context_are_refused_before_sending(qtbot, make_window, tmp_path: Path) -> None:
    """Bug caught: a long file sent anyway, cut by the engine with a vague error, the question lost."""
    engine = ScriptedEngineDouble([Script(["never"])])
    settings = Settings(engine=EngineConfig(max_model_len=512), sampling=SamplingConfig(think_budget=64, max_tokens=64))
    window = make_window(engine, settings)
    wait_ready(qtbot, window)
    log = tmp_path / "build.log"
    log.write_text("error: something failed in step number forty two\n" * 200)
    given_files(window, log)
    window.prompt.setPlainText("Why did the build fail?")
    window.controls.send_button.click()
    qtbot.waitUntil(window.banner.isVisible, timeout=5_000)
    assert "too many" in window.banner.text() and "512" in window.banner.text()
    assert engine.requests == [], "nothing was sent"
    assert window.prompt.toPlainText() == "Why did the build fail?" and len(window.attachments.attachments) == 1


def test_a_binary_file_is_refused_with_its_reason(qtbot, make_window, tmp_path: Path) -> None:
    """Bug caught: a binary file sent to the model as mojibake."""
    window = make_window(ScriptedEngineDouble())
    wait_ready(qtbot, window)
    blob = tmp_path / "model.bin"
    blob.write_bytes(b"\x00\x01\x02" * 100)
    given_files(window, blob)
    assert window.attachments.attachments == []
    assert window.banner.isVisible() and "binary" in window.banner.text()
