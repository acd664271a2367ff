"""Tools in the window: cards between the thinking and the answer, Settings → Tools, the Tools switch.

The ToolCallingScriptedDouble plays the model (deterministic order of events); the MCP server is real
(tests/support/mcp_demo_server.py over stdio).
"""

from __future__ import annotations

import sys

from PySide6.QtCore import Qt

from app.core.chat.reply import AFTER_TOOLS
from app.core.settings.settings import (
    EngineConfig,
    SamplingConfig,
    Settings,
    ToolsConfig,
    ToolServer,
    changed,
    load_settings,
)
from app.engine.scripted import Script
from tests.support import MCP_DEMO_SERVER
from tests.support.tool_double import CallScript, ToolCallingScriptedDouble

DEMO = ToolServer(name="demo", command=sys.executable, args=(MCP_DEMO_SERVER,))


def tool_settings(**tools: object) -> Settings:
    return Settings(engine=EngineConfig(max_model_len=2048), sampling=SamplingConfig(think_budget=64, max_tokens=64),
                    tools=ToolsConfig(servers=(DEMO,), **tools))  # type: ignore[arg-type]


def window_with_tools(qtbot, make_window, *scripts):  # type: ignore[no-untyped-def]
    window = make_window(ToolCallingScriptedDouble(list(scripts)), tool_settings())
    qtbot.waitUntil(lambda: window.controller.engine_ready and "demo" in window.tools.states, timeout=30_000)
    window.controls.tools_switch.setChecked(True)
    return window


def test_a_call_shows_between_thinking_and_answer_and_runs_on_run(qtbot, make_window) -> None:
    """Bug caught: the card missing or out of order (after the answer), buttons that do nothing, a result shown
    unfolded or lost, or the further thinking overwriting the thinking that led to the call."""
    window = window_with_tools(qtbot, make_window, CallScript("I will add them.", [("add", '{"a": 20, "b": 22}')]),
                               Script(["<think>the tool says 42</think>", "The sum is **42**."]))
    view = window.chat_view
    window.prompt.setPlainText("What is 20+22?")
    qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(view.tool_panel.cards) == 1, timeout=20_000)
    order = [view.live_split.widget(i) for i in range(3)]
    assert order == [view.thinking_pane, view.tool_panel, view.answer_pane]
    [card] = view.tool_panel.cards.values()
    assert "I will add them." in window.chat_view.thinking_pane.text() and not window.chat_view.answer_pane.text()
    assert card.run_button.isVisible() and card.always_button.isVisible() and card.deny_button.isVisible()
    assert '"a": 20' in card.arguments.text() and "add" in card.title.text()
    controls = window.controls
    assert controls.stop_button.isEnabled() and controls.regenerate_button.isEnabled(), "usable during the call"
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):
        qtbot.mouseClick(card.run_button, Qt.MouseButton.LeftButton)
    assert not card.run_button.isVisible() and card.result_folded and card.result_view.toPlainText() == "42"
    trace = window.chat_view.thinking_pane.text()
    assert trace.index("I will add them.") < trace.index(AFTER_TOOLS.strip()) < trace.index("the tool says 42")
    assert "42" in window.chat_view.answer_pane.text()


def test_results_are_text_never_markup(qtbot, make_window) -> None:
    """Bug caught: a tool result rendered as HTML in the card or the thread (a server could inject links,
    images or fake UI into the conversation)."""
    window = window_with_tools(qtbot, make_window, CallScript("look", [("markup", "{}")]), Script(["shown"]),
                               Script(["next"]))
    window.prompt.setPlainText("show markup")
    qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(window.chat_view.tool_panel.cards) == 1, timeout=20_000)
    [card] = window.chat_view.tool_panel.cards.values()
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):
        qtbot.mouseClick(card.always_button, Qt.MouseButton.LeftButton)
    raw = "<b>bold?</b><script>alert(1)</script><img src=x onerror=alert(2)>"
    assert card.result_view.toPlainText() == raw
    assert card.result_toggle.text().startswith("Result: <b>bold?</b>"), "the summary is literal text"
    with qtbot.waitSignal(window.reply_finished, timeout=20_000):  # the call moves up into the thread
        window.prompt.setPlainText("and now?")
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
    thread = window.chat_view.transcript.toHtml()
    assert "<script>" not in thread and "&lt;script&gt;" in thread
    assert "<b>bold?</b>" in window.chat_view.transcript.toPlainText(), "shown, as text"
    assert load_settings()[0].tools.always_allow == ("demo/markup",)


def test_the_tools_switch_is_kept_per_chat(qtbot, make_window) -> None:
    """Bug caught: the Tools switch shared by every chat, or forgotten when a chat is shown again."""
    window = window_with_tools(qtbot, make_window)
    first = window.session.conversation
    assert first.tools is True
    window.session.store.new_conversation()
    assert window.session.conversation.tools is False and not window.controls.tools_switch.isChecked()
    window.session.store.select(0)
    assert window.controls.tools_switch.isChecked()
    assert [c.tools for c in window.session.history.conversations()] == [True, False]


def test_settings_tools_tab_adds_lists_and_switches_tools(qtbot, make_window) -> None:
    """Bug caught: a remote URL accepted as a tool server, a server's tools not listed, or a switched-off tool
    still offered to the model after Apply."""
    window = make_window(ToolCallingScriptedDouble([Script(["plain"])]))
    dialog = window.dialogs.open_settings()
    tab = dialog.tools_tab
    tab.name_edit.setText("far")
    tab.line_edit.setText("http://198.51.100.7:8000/mcp")
    assert not tab.add_from_fields() and "not this machine" in tab.problem.text()
    tab.name_edit.setText("demo")
    tab.line_edit.setText(f"{sys.executable} {DEMO.args[0]}")
    assert tab.add_from_fields() and tab.servers == [DEMO]
    qtbot.mouseClick(tab.connect_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.tool_item("demo", "add") is not None, timeout=30_000)
    assert window.tools.offered(window.controller.settings.tools) == [], "not offered before Apply"
    slow = tab.tool_item("demo", "slow")
    assert slow is not None and slow.checkState(1) == Qt.CheckState.Checked
    slow.setCheckState(1, Qt.CheckState.Unchecked)
    always = tab.tool_item("demo", "add")
    assert always is not None
    always.setCheckState(2, Qt.CheckState.Checked)
    qtbot.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Ok), Qt.MouseButton.LeftButton)
    saved = load_settings()[0].tools
    assert saved.servers == (DEMO,) and saved.disabled == ("demo/slow",) and saved.always_allow == ("demo/add",)
    qtbot.waitUntil(lambda: bool(window.tools.offered(window.controller.settings.tools)), timeout=30_000)
    assert "slow" not in {t.name for t in window.tools.offered(window.controller.settings.tools)}


def test_a_stored_reply_shows_its_calls_without_buttons(qtbot, make_window) -> None:
    """Bug caught: a call left waiting by a crash shown again with a Run button that runs nothing (or, worse,
    runs a tool outside any reply)."""
    from app.core.chat.conversation import Conversation, ToolRound, ToolStep, Turn
    from app.core.chat.history import HistoryStore

    store = HistoryStore()
    conversation = Conversation(title="old", tools=True)
    turn = Turn(user="q", answer="a", finish_reason="interrupted", tool_rounds=[ToolRound("t", [
        ToolStep("c1", "add", '{"a": 1, "b": 2}', "demo", "3", "ok"), ToolStep("c2", "slow", "{}", "demo")])])
    conversation.turns.append(turn)
    store.start_turn(conversation, turn)
    store.finish_turn(turn)
    store.close()
    window = make_window(ToolCallingScriptedDouble([]), tool_settings())
    done, waiting = window.chat_view.tool_panel.cards.values()
    assert done.result_view.toPlainText() == "3" and done.result_folded
    assert not waiting.run_button.isVisible() and waiting.status.text() == "not run"
    assert window.chat_view.thinking_pane.text() == "t" + "\n\n— after the tool results —\n"


def test_a_server_only_tried_in_settings_ends_on_cancel(qtbot, make_window) -> None:
    """Bug caught: a server connected with "Connect and list tools" left running (and its tools one step
    from being offered) after the dialog is cancelled: commands must come only from saved settings."""
    window = make_window(ToolCallingScriptedDouble([]))
    dialog = window.dialogs.open_settings()
    tab = dialog.tools_tab
    tab.name_edit.setText("demo")
    tab.line_edit.setText(f"{sys.executable} {DEMO.args[0]}")
    assert tab.add_from_fields()
    qtbot.mouseClick(tab.connect_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.tool_item("demo", "add") is not None, timeout=30_000)
    dialog.reject()
    qtbot.waitUntil(lambda: window.tools.states == {}, timeout=30_000)
    assert window.tools.offered(window.controller.settings.tools) == []


def test_servers_follow_a_settings_change_made_anywhere(qtbot, make_window) -> None:
    """Bug caught: the tool servers synced only where the Settings dialog applied (once the window's own
    apply_settings), so a change through EngineController.apply_settings from elsewhere (the model chooser,
    a retry's fallback) left the servers it names unconnected, or removed ones still running."""
    window = make_window(ToolCallingScriptedDouble([]))
    qtbot.waitUntil(lambda: window.controller.engine_ready, timeout=30_000)
    assert window.tools.states == {}
    window.controller.apply_settings(changed(window.controller.settings, tools=ToolsConfig(servers=(DEMO,))))
    qtbot.waitUntil(lambda: "demo" in window.tools.states, timeout=30_000)
    window.controller.apply_settings(changed(window.controller.settings, tools=ToolsConfig()))
    qtbot.waitUntil(lambda: window.tools.states == {}, timeout=30_000)
