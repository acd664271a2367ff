"""A gpt-oss (Harmony) reply through the real window path: panes and a tool card.

The scripted engine double plays the model's token ids (Harmony written with the real o200k encoding, on
gpt-oss's tokenizer rebuilt offline), through the gpt-oss family's splitter and tool gate as EngineHost
would; the MCP server is real (tests/support/mcp_demo_server.py over stdio).
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.engine.scripted import ScriptedEngineDouble
from tests.support.harmony_tokenizer import ANSWER_42, CALL_ADD, harmony_script
from tests.ui.test_window_tools import tool_settings

pytest.importorskip("openai_harmony")

MARKUP = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>", "<|constrain|>", "analysis", "commentary")


def test_a_harmony_reply_fills_the_panes_and_its_call_is_a_card(qtbot, make_window) -> None:  # type: ignore[no-untyped-def]
    """Bug caught: gpt-oss's Harmony markup shown in the answer pane (channels not split), its analysis missing
    from the thinking pane, or its commentary call not becoming a tool card (the call lost as text)."""
    call, answer = harmony_script(CALL_ADD), harmony_script(ANSWER_42)
    window = make_window(ScriptedEngineDouble([call, answer]), tool_settings())
    qtbot.waitUntil(lambda: window.controller.engine_ready and "demo" in window.tools.states, timeout=30_000)
    window.controls.tools_switch.setChecked(True)
    view = window.chat_view
    window.prompt.setPlainText("What is 20+22?")
    qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(view.tool_panel.cards) == 1, timeout=30_000)
    [card] = view.tool_panel.cards.values()
    assert "add" in card.title.text() and '"a": 20' in card.arguments.text()
    assert "They want 20+22. I will use add." in view.thinking_pane.text()
    assert not view.answer_pane.text(), "the call's markup must not reach the answer pane"
    with qtbot.waitSignal(window.reply_finished, timeout=30_000):
        qtbot.mouseClick(card.run_button, Qt.MouseButton.LeftButton)
    assert card.result_view.toPlainText() == "42"
    thinking, shown = view.thinking_pane.text(), view.answer_pane.text()
    assert "The tool says 42." in thinking and "42" in shown
    assert not [m for m in MARKUP if m in shown or m in thinking], (thinking, shown)


def test_gpt_oss_shows_an_effort_control_whose_choice_reaches_the_next_reply(qtbot, make_window) -> None:  # type: ignore[no-untyped-def]
    """Bug caught: gpt-oss's Think control locked with no way to choose its reasoning effort, or the window's
    choice not saved to the settings and the next reply's sampling (so the prompt kept 'Reasoning: medium');
    and the control shown for families that have no effort."""
    engine = ScriptedEngineDouble([harmony_script(ANSWER_42)], model_name="openai/gpt-oss-20b")
    window = make_window(engine)
    effort = window.controls.effort_choice
    # The window shows the family's controls in its ready slot, after the controller's flag: wait on the control.
    qtbot.waitUntil(lambda: window.controller.engine_ready and effort.isVisibleTo(window), timeout=30_000)
    assert effort.currentData() == "medium"
    assert not window.controls.think_switch.isEnabled(), "gpt-oss always thinks"
    effort.setCurrentIndex(effort.findData("high"))
    effort.activated.emit(effort.currentIndex())
    assert window.controller.settings.sampling.reasoning_effort == "high"
    window.prompt.setPlainText("What is 20+22?")
    with qtbot.waitSignal(window.reply_finished, timeout=30_000):
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    assert engine.samplings[-1].reasoning_effort == "high"


def test_the_effort_control_is_hidden_for_a_model_without_one(qtbot, make_window) -> None:  # type: ignore[no-untyped-def]
    """Bug caught: the gpt-oss effort control shown next to a Qwen3 or plain model's Think switch."""
    window = make_window(ScriptedEngineDouble([], model_name="Qwen/Qwen3-0.6B"))
    qtbot.waitUntil(lambda: window.controller.engine_ready, timeout=30_000)
    assert not window.controls.effort_choice.isVisibleTo(window)
    assert window.controls.think_switch.isEnabled()
