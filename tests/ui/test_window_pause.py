"""Pause, edit, resume in the window, against the ScriptedEngineDouble: when Pause applies, the editable
pane, what Resume sends, and how Esc, another chat and a remote backend end or refuse a pause."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from app.core.chat.conversation import ThinkingEdit
from app.core.chat.history import HistoryStore
from app.core.chat.history_import import export_json, export_markdown
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
from app.core.steering.thinking_pause import CANT_PAUSE_REMOTE, DROPPED, PAUSED
from app.engine.requests import Resume
from app.engine.scripted import Script, ScriptedEngineDouble

SETTINGS = Settings(engine=EngineConfig(max_model_len=4096), sampling=SamplingConfig(think_budget=2000, max_tokens=64))
LONG_THOUGHT = ["<think>", *(f"step{i} " for i in range(400)), "</think>", "The answer."]  # 100/s: 4 s of thinking
AFTER_EDIT = [" so it is 3 metres", "</think>", "3 m."]  # what the model writes after the edited thinking
HINT = "\nHint: check the units."


def pause_mid_thought(qtbot, window) -> str:
    """Send, wait until the reply has thought a little, press Pause; the thinking as the pause took it."""
    controls, session = window.controls, window.session
    window.prompt.setPlainText("How long is 300 cm?")
    controls.send_button.click()
    qtbot.waitUntil(lambda: session.reply.thinking.count("step") >= 3 and controls.pause_button.isEnabled(),
                    timeout=10_000)
    controls.pause_button.click()
    qtbot.waitUntil(lambda: session.pause.paused, timeout=10_000)
    return session.conversation.turns[-1].thinking


def test_pause_then_an_added_hint_resumes_from_exactly_the_edited_text_and_the_turn_keeps_both(qtbot,
                                                                                               make_window) -> None:
    """Bug caught: Resume sends the thinking as the model left it (the edit lost), the pane stays read-only while
    paused, or the turn keeps only one version (the original, or the edit) in the history and the exports."""
    engine = ScriptedEngineDouble([Script(LONG_THOUGHT, tokens_per_second=100), Script(AFTER_EDIT),
                                   Script(["<think>x</think>", "3000 mm."])])
    window = make_window(engine, SETTINGS)
    controls, pane, session = window.controls, window.chat_view.thinking_pane, window.session
    qtbot.waitUntil(controls.send_button.isEnabled, timeout=10_000)
    assert not controls.pause_button.isEnabled(), "nothing thinks yet"
    original = pause_mid_thought(qtbot, window)
    assert original.startswith("step0 ") and "The answer" not in session.conversation.turns[-1].answer
    assert not pane.view.isReadOnly() and pane.edited_text() == original and not pane.folded
    assert controls.resume_button.isVisible() and controls.resume_button.isEnabled()
    assert not controls.pause_button.isVisible() and controls.stop_button.isEnabled()
    assert window.notice_label.text() == PAUSED
    pane.view.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClick(pane.view, Qt.Key.Key_Return)  # typed, as the user does
    qtbot.keyClicks(pane.view, HINT.strip())
    edited = original + HINT
    assert pane.edited_text() == edited
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):
        window.menus.trigger("resume_thinking")
    assert engine.resumes == [None, Resume("thinking", edited)], "Resume sends the edited text, whole"
    turn = session.conversation.turns[-1]
    assert len(session.conversation.turns) == 1, "the reply goes on in the same turn"
    assert (turn.thinking, turn.answer) == (edited + " so it is 3 metres", "3 m.")
    assert turn.thinking_edits == [ThinkingEdit(original, edited)]
    assert turn.thinking_edits[0].at == len(original) and turn.thinking_edits[0].inserted == HINT
    assert pane.view.isReadOnly() and pane.edit_note.isVisible() and "edited this thinking" in pane.edit_note.text()
    [mark] = pane.view.extraSelections()
    assert mark.cursor.selectedText() == HINT.replace("\n", "\u2029"), "the user's text is what is highlighted"
    row = session.history.message_row(turn.message_id)
    assert json.loads(row["thinking_edits"]) == [{"original": original, "edited": edited}]
    reopened = HistoryStore(session.history.path, owner=False)
    try:
        assert reopened.conversations()[-1].turns[-1].thinking_edits == [ThinkingEdit(original, edited)]
    finally:
        reopened.close()
    markdown = export_markdown(session.conversation)
    assert f"Thinking edited by the user (edit 1, from character {len(original)})" in markdown
    assert "Hint: check the units." in markdown
    exported = json.loads(export_json(session.conversation))
    assert exported["messages"][0]["thinking_edits"] == [{"original": original, "edited": edited}]
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):
        window.prompt.setPlainText("And in mm?")
        controls.send_button.click()
    assert "thinking edited by you (1×)" in window.chat_view.transcript.toPlainText(), "the thread marks the turn"
    assert not pane.edit_note.isVisible() and pane.view.extraSelections() == [], "the new reply has no edit"


def test_pause_applies_only_while_the_reply_thinks(qtbot, make_window) -> None:
    """Bug caught: Pause left enabled once the answer streams, stopping an answer it can't resume as thinking."""
    engine = ScriptedEngineDouble([Script(["<think>", "quick", "</think>", *(f"w{i} " for i in range(300))],
                                          tokens_per_second=100)])
    window = make_window(engine, SETTINGS)
    controls, session = window.controls, window.session
    qtbot.waitUntil(controls.send_button.isEnabled, timeout=10_000)
    window.prompt.setPlainText("count")
    controls.send_button.click()
    qtbot.waitUntil(lambda: session.reply.answer.count("w") >= 3, timeout=10_000)
    assert session.streaming and not controls.pause_button.isEnabled() and not session.can_pause
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):
        window.menus.trigger("pause_thinking")  # does nothing now
        window.menus.trigger("stop")
    assert session.pause.state == "off" and "Stopped" in window.notice_label.text()
    assert window.chat_view.thinking_pane.view.isReadOnly()

    window.controls.think_switch.setChecked(False)  # a chat that doesn't think has nothing to pause
    engine.scripts.append(Script([f"w{i} " for i in range(300)], think_start="closed", tokens_per_second=100))
    window.prompt.setPlainText("count again")
    controls.send_button.click()
    qtbot.waitUntil(lambda: session.streaming, timeout=10_000)
    assert not session.can_pause and not controls.pause_button.isEnabled()
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):
        window.menus.trigger("stop")


def test_esc_while_paused_drops_the_edit_and_keeps_the_turn_as_paused(qtbot, make_window) -> None:
    """Bug caught: Esc while paused did nothing (not streaming), leaving the pane editable with an edit that
    no Resume would ever send, or the typed edit saved as if the model had read it."""
    engine = ScriptedEngineDouble([Script(LONG_THOUGHT, tokens_per_second=100)])
    window = make_window(engine, SETTINGS)
    pane, session = window.chat_view.thinking_pane, window.session
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=10_000)
    original = pause_mid_thought(qtbot, window)
    pane.view.setPlainText("a different line of thought")
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: session.pause.state == "off", timeout=5_000)
    assert pane.view.isReadOnly() and pane.text() == original and pane.view.toPlainText() == original
    turn = session.conversation.turns[-1]
    assert (turn.thinking, turn.finish_reason, turn.thinking_edits) == (original, "abort", [])
    assert window.notice_label.text() == DROPPED and engine.resumes == [None]
    assert not window.controls.resume_button.isVisible() and window.controls.send_button.isEnabled()


def test_switching_chats_while_paused_ends_the_pause(qtbot, make_window) -> None:
    """Bug caught: the pause outlived its chat, so Resume sent one chat's edited thinking as another's reply."""
    engine = ScriptedEngineDouble([Script(LONG_THOUGHT, tokens_per_second=100)])
    window = make_window(engine, SETTINGS)
    pane, session = window.chat_view.thinking_pane, window.session
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=10_000)
    original = pause_mid_thought(qtbot, window)
    qtbot.keyClicks(pane.view, HINT.strip())
    session.store.new_conversation()
    assert session.pause.state == "off" and pane.view.isReadOnly() and pane.text() == ""
    window.menus.trigger("resume_thinking")  # nothing to resume here
    assert engine.resumes == [None] and not session.streaming
    session.store.select(0)
    first = session.conversation.turns[-1]
    assert (first.thinking, first.thinking_edits) == (original, [])
    assert pane.view.isReadOnly() and pane.text() == original


@pytest.mark.parametrize("refusal", ["", "http://box/v1 has no vLLM /tokenize"])
def test_a_remote_backend_has_pause_disabled_with_the_reason(qtbot, make_window, refusal: str) -> None:
    """Bugs caught: Pause offered on a backend that can't go on from a given thinking (a chat endpoint), where
    Resume would silently ask anew and lose the edit; the engine's own reason (which server, what it lacks)
    replaced by the generic one."""
    engine = ScriptedEngineDouble([Script(LONG_THOUGHT, tokens_per_second=100)])
    engine.can_resume = False  # as a RemoteEngine without vLLM's /tokenize, and the failover, say
    engine.resume_refusal = refusal
    window = make_window(engine, SETTINGS)
    controls, session = window.controls, window.session
    qtbot.waitUntil(controls.send_button.isEnabled, timeout=10_000)
    window.prompt.setPlainText("How long is 300 cm?")
    controls.send_button.click()
    qtbot.waitUntil(lambda: session.reply.thinking.count("step") >= 3, timeout=10_000)
    assert not controls.pause_button.isEnabled() and controls.pause_button.toolTip() == (refusal or CANT_PAUSE_REMOTE)
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):
        window.menus.trigger("pause_thinking")  # refused: the reply streams on
        window.menus.trigger("stop")
    assert session.pause.state == "off" and "Stopped" in window.notice_label.text()
