"""The main window against the ScriptedEngineDouble: deterministic streams, what the user sees."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from PySide6.QtCore import Qt

from app.core.settings.settings import EngineConfig, Settings
from app.engine.errors import EngineFailure, EngineFix, FailureKind
from app.engine.scripted import Script, ScriptedEngineDouble

CUT_TAGS = ["<th", "ink>Let me ", "think.</thi", "nk>\n", "\nAnswer ", "here: `5`."]


def wait_ready(qtbot, window) -> None:
    qtbot.waitUntil(lambda: window.controls.send_button.isEnabled(), timeout=10_000)


def send(qtbot, window, text: str = "What is 2+3?"):
    with qtbot.waitSignal(window.reply_finished, timeout=20_000) as blocker:
        window.prompt.setPlainText(text)
        window.controls.send_button.click()
    return blocker.args[0]


def test_input_waits_for_the_engine_and_status_says_loading(qtbot, make_window) -> None:
    window = make_window(ScriptedEngineDouble(load_seconds=0.3))
    qtbot.waitUntil(lambda: "loading model" in window.status_bar.status_label.text(), timeout=5_000)
    assert not window.prompt.isEnabled() and not window.controls.send_button.isEnabled()
    wait_ready(qtbot, window)
    assert window.prompt.isEnabled()
    assert "ready" in window.status_bar.status_label.text()
    assert window.gauges.kv_bar.text() == "0% of 46,592 tokens"


def test_tags_cut_across_deltas_land_in_the_right_panes(qtbot, make_window) -> None:
    window = make_window(ScriptedEngineDouble([Script(CUT_TAGS, tokens_per_second=100)]))
    wait_ready(qtbot, window)
    finished = send(qtbot, window)
    assert finished.reason == "stop"
    assert window.chat_view.thinking_pane.text() == "Let me think."
    assert window.chat_view.answer_pane.text() == "Answer here: `5`."
    shown = window.chat_view.answer_pane.view.toPlainText()
    assert "5" in shown and "`" not in shown
    assert window.chat_view.thinking_pane.folded, "thinking folds away once the answer starts"
    window.chat_view.thinking_pane.toggle.click()
    assert not window.chat_view.thinking_pane.folded and window.chat_view.thinking_pane.view.isVisible()
    assert window.chat_view.thinking_pane.header.text().startswith("Thinking · 2 / 64 tokens")
    assert window.controls.send_button.isEnabled() and window.controls.copy_button.isEnabled()
    assert not window.controls.stop_button.isEnabled() and not window.controls.answer_now_button.isEnabled()
    assert "%" in window.gauges.kv_bar.text() and window.gauges.kv_usage > 0
    assert "tok/s" in window.gauges.answer_rate.text()
    assert window.gauges.ttft.text().endswith("ms")
    assert window.conversation_list.title(0) == "What is 2+3?"


def test_error_mid_stream_keeps_the_partial_reply_and_offers_a_restart(qtbot, make_window) -> None:
    script = Script(["<think>step one ", "step two</think>", "Partial ", "answer ", "lost"], fail_after=4)
    engine = ScriptedEngineDouble([script])
    window = make_window(engine)
    wait_ready(qtbot, window)
    finished = send(qtbot, window)
    assert finished.reason == "error"
    assert window.chat_view.answer_pane.text() == "Partial answer "
    assert window.banner.isVisible() and "stopped unexpectedly" in window.banner.text()
    assert window.banner.action.text() == "Restart engine"
    assert window.session.conversation.turns[-1].answer == "Partial answer "
    with qtbot.waitSignal(window.controller.bridge.engine_ready, timeout=10_000):
        window.banner.action.click()
    assert len(engine.starts) == 2


def test_very_fast_stream_delivers_every_character_in_few_updates(qtbot, make_window) -> None:
    words = [f"w{i} " for i in range(4000)]
    window = make_window(ScriptedEngineDouble([Script(["<think>fast</think>", *words], tokens_per_second=50_000)]))
    wait_ready(qtbot, window)
    updates: list[str] = []

    def count_update(request_id: str, text: str) -> None:
        updates.append(text)

    window.controller.bridge.answer_delta.connect(count_update)
    send(qtbot, window)
    window.controller.bridge.answer_delta.disconnect(count_update)
    assert window.chat_view.answer_pane.text() == "".join(words)
    assert len(updates) < len(words) / 10, "text must be coalesced per frame, not one update per token"


def test_stop_aborts_a_slow_stream_at_once(qtbot, make_window) -> None:
    slow = Script(["<think>"] + [f"thought {i} " for i in range(200)], tokens_per_second=5)
    window = make_window(ScriptedEngineDouble([slow]))
    wait_ready(qtbot, window)
    window.prompt.setPlainText("think slowly")
    window.controls.send_button.click()
    qtbot.waitUntil(lambda: window.chat_view.thinking_pane.text() != "", timeout=5_000)
    assert window.controls.stop_button.isEnabled() and not window.controls.send_button.isEnabled()
    with qtbot.waitSignal(window.reply_finished, timeout=2_000) as blocker:
        window.controls.stop_button.click()
    assert blocker.args[0].reason == "abort"
    assert window.chat_view.thinking_pane.text().startswith("thought 0")
    assert window.notice_label.isVisible() and "Stopped" in window.notice_label.text()
    assert window.controls.send_button.isEnabled() and not window.controls.stop_button.isEnabled()


def test_answer_now_ends_thinking_and_answers(qtbot, make_window) -> None:
    slow = Script(["<think>"] + [f"t{i} " for i in range(40)] + ["</think>never"], tokens_per_second=40)
    window = make_window(ScriptedEngineDouble([slow]))
    wait_ready(qtbot, window)
    window.prompt.setPlainText("hurry")
    window.controls.send_button.click()
    qtbot.waitUntil(lambda: window.chat_view.thinking_pane.text() != "", timeout=5_000)
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        window.controls.answer_now_button.click()
    assert window.chat_view.answer_pane.text() != ""
    assert len(window.chat_view.thinking_pane.text().split()) < 40


def test_regenerate_replaces_the_last_reply(qtbot, make_window) -> None:
    engine = ScriptedEngineDouble([Script(["<think>a</think>first"]), Script(["<think>b</think>second"])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    send(qtbot, window, "question")
    assert window.chat_view.answer_pane.text() == "first"
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        window.controls.regenerate_button.click()
    assert window.chat_view.answer_pane.text() == "second"
    assert len(window.session.conversation.turns) == 1
    assert engine.requests[0] == engine.requests[1] == [{"role": "user", "content": "question"}]


def test_enter_sends_and_shift_enter_adds_a_line(qtbot, make_window) -> None:
    engine = ScriptedEngineDouble([Script(["<think>x</think>y"])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    qtbot.keyClicks(window.prompt, "line one")
    qtbot.keyClick(window.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(window.prompt, "line two")
    assert window.prompt.toPlainText() == "line one\nline two"
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    assert engine.requests == [[{"role": "user", "content": "line one\nline two"}]]
    assert window.prompt.toPlainText() == ""


def test_second_turn_sends_the_history_without_thinking(qtbot, make_window) -> None:
    engine = ScriptedEngineDouble([Script(["<think>secret</think>four"]), Script(["<think>z</think>five"])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    send(qtbot, window, "2+2?")
    send(qtbot, window, "and plus one?")
    assert engine.requests[1] == [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "four"},
                                  {"role": "user", "content": "and plus one?"}]
    assert "four" in window.chat_view.transcript.toPlainText()


def test_failed_start_names_the_fix_and_retries_on_the_fallback(qtbot, make_window) -> None:
    failure = EngineFailure(FailureKind.KV_DTYPE_UNSUPPORTED, "FP8 KV cache needs AVX-512 or AMX.",
                            "Use KV cache dtype 'auto' (bf16).", EngineFix(kv_cache_dtype="auto"))
    engine = ScriptedEngineDouble(start_failure=failure)
    settings = Settings(engine=EngineConfig(kv_cache_dtype="fp8_e4m3"))
    window = make_window(engine, settings)
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=5_000)
    assert "AVX-512" in window.banner.text() and "auto" in window.banner.text()
    assert window.banner.action.text() == "Retry with kv_cache_dtype = auto"
    assert not window.controls.send_button.isEnabled()
    window.banner.action.click()
    wait_ready(qtbot, window)
    assert [c.kv_cache_dtype for c in engine.starts] == ["fp8_e4m3", "auto"]
    assert window.gauges.kv_label.text() == "KV cache (auto)"


def test_conversations_new_rename_delete(qtbot, make_window, monkeypatch) -> None:
    from PySide6.QtWidgets import QInputDialog, QMessageBox

    window = make_window(ScriptedEngineDouble([Script(["<think>a</think>b"])]))
    wait_ready(qtbot, window)
    send(qtbot, window, "first chat")
    window.conversation_list.new_button.click()
    assert window.conversation_list.count() == 2 and window.chat_view.answer_pane.text() == ""
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("Renamed", True))
    window.conversation_list.rename_button.click()
    assert window.conversation_list.title(1) == "Renamed"
    window.conversation_list.select(0)
    assert window.chat_view.answer_pane.text() == "b"
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    window.conversation_list.delete_button.click()
    assert [c.title for c in window.session.store.model] == ["Renamed"]


def test_memory_gauge_says_which_memory_it_shows(qtbot, make_window) -> None:
    window = make_window(ScriptedEngineDouble())
    expected = "VRAM" if window.gauges.memory_probe.has_gpu else "RAM (no NVIDIA GPU)"
    assert window.gauges.memory_label.text() == expected
    assert "GiB" in window.gauges.memory_bar.text()


def test_settings_notice_is_shown(qtbot, make_window) -> None:
    window = make_window(ScriptedEngineDouble(), notice="Your settings file could not be read.")
    assert window.banner.isVisible() and "could not be read" in window.banner.text()


def test_trimmed_context_is_announced(qtbot, make_window) -> None:
    window = make_window(ScriptedEngineDouble([Script(["<think>t</think>a"], trimmed_messages=4)]))
    wait_ready(qtbot, window)
    send(qtbot, window)
    assert window.notice_label.isVisible()
    assert "oldest 4 message(s) were left out" in window.notice_label.text()


def test_a_too_long_message_is_a_clear_error(qtbot, make_window) -> None:
    failure = EngineFailure(FailureKind.PROMPT_TOO_LONG, "The message is 9,000 tokens; the context holds 2,048.",
                            "Shorten the message, or raise the context length in Settings.")
    window = make_window(ScriptedEngineDouble([Script(["never shown"], fail_after=0, failure=failure)]))
    wait_ready(qtbot, window)
    assert send(qtbot, window).reason == "error"
    assert "9,000 tokens" in window.banner.text() and "raise the context length" in window.banner.text()
    assert window.controls.send_button.isEnabled()


def test_settings_has_a_shortcut_on_every_platform(qtbot, make_window) -> None:
    """StandardKey.Preferences is empty on Linux, so Settings had no shortcut there. Bug caught: an empty one."""
    from PySide6.QtGui import QAction

    window = make_window(ScriptedEngineDouble())
    settings = next(a for a in window.findChildren(QAction) if a.text().startswith("&Settings"))
    assert not settings.shortcut().isEmpty()
    if sys.platform.startswith("linux"):
        assert settings.shortcut().toString() == "Ctrl+,"


def test_ui_bench_without_a_display_falls_back_to_offscreen() -> None:
    """`nalar bench ui` with no display aborted inside Qt's plugin loader. Bug caught: no fallback."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    code = ("from app.commands.window_bench.harness import qt_app; app, loop = qt_app(); "
            "print('platform', app.platformName())")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "platform offscreen" in result.stdout and "no display found" in result.stderr


def test_the_question_stands_above_its_reply_and_the_folded_trace_is_one_line(qtbot, make_window) -> None:
    engine = ScriptedEngineDouble([Script(CUT_TAGS, tokens_per_second=100), Script(["<think>z</think>six"])])
    window = make_window(engine)
    wait_ready(qtbot, window)
    send(qtbot, window, "What is 2+3?")
    transcript = window.chat_view.transcript
    lines = [line for line in transcript.toPlainText().splitlines() if line.strip()]
    assert transcript.isVisible() and len(lines) == 2 and lines[0].startswith("You") and lines[1] == "What is 2+3?"
    pane, answer = window.chat_view.thinking_pane, window.chat_view.answer_pane
    assert pane.folded
    # Folded: a header line above the answer, and the answer has the view's whole width.
    qtbot.waitUntil(lambda: pane.height() < 3 * pane.header.sizeHint().height() + 20, timeout=5_000)
    assert answer.width() > 0.9 * window.chat_view.width() and answer.height() > 4 * pane.height()
    pane.toggle.click()
    qtbot.waitUntil(lambda: pane.height() > 0.3 * window.chat_view.live_split.height(), timeout=5_000)
    send(qtbot, window, "And plus one?")
    thread = window.chat_view.transcript.toPlainText()
    assert thread.index("What is 2+3?") < thread.index("Answer here") < thread.index("And plus one?")
    assert answer.text() == "six"


def test_a_send_appends_to_the_thread_and_it_reads_as_a_fresh_render(qtbot, make_window) -> None:
    """A send appends the previous reply and the new question instead of rendering the whole thread
    again (85 ms for 30 long turns, growing with the thread). Bugs caught: the previous reply left out
    or added twice; a thread that drifts from what a fresh render (switching to it) shows."""
    from app.ui.chat.chat_view import ChatView

    scripts = [Script([f"<think>t{n}</think>answer number {n}"]) for n in range(5)]
    window = make_window(ScriptedEngineDouble(scripts))
    wait_ready(qtbot, window)
    for question in ("first question", "second question", "third question"):
        send(qtbot, window, question)
    first = window.session.conversation
    window.session.store.new_conversation()
    send(qtbot, window, "elsewhere")
    window.show_conversation(next(row for row in range(len(window.session.store.model))
                                  if window.session.store.model[row] is first))
    send(qtbot, window, "fourth question")

    fresh = ChatView()
    fresh.keep_switches = window.chat_view.keep_switches  # each earlier reply's "keep its thinking" line
    fresh.render_thread(window.session.conversation)
    thread = window.chat_view.transcript.toPlainText()
    assert thread == fresh.transcript.toPlainText()
    assert [thread.count(f"answer number {n}") for n in (0, 1, 2)] == [1, 1, 1]
    assert thread.count("Keep its thinking: off") == 3
    assert "elsewhere" not in thread and thread.rstrip().endswith("fourth question")


def test_the_startup_heap_is_frozen_once_the_engine_is_ready(qtbot, make_window) -> None:
    """Bug caught: every full collection walking the window's ~70,000 start-up objects (modules, widgets), one
    falling mid-stream and stalling a refresh 76 ms at 5,000 tok/s."""
    gc.unfreeze()  # whatever an earlier test froze
    window = make_window()
    wait_ready(qtbot, window)
    qtbot.waitUntil(lambda: gc.get_freeze_count() > 0, timeout=5_000)
