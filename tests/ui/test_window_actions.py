"""The window's actions are one table: every action is in a menu, its shortcut is bound, and keys do what they say."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtTest import QTest

from app.engine.scripted import Script, ScriptedEngineDouble
from app.ui.actions import ACTIONS, BY_ID, MENUS, shortcut_rows


def wait_ready(qtbot, window) -> None:
    qtbot.waitUntil(lambda: window.controls.send_button.isEnabled(), timeout=10_000)


def test_every_action_has_a_menu_entry_that_runs_its_own_handler(qtbot, make_window) -> None:
    """Bug caught: an action in the table that no menu shows, or a menu entry wired to another action's
    handler (a copy-pasted lambda: "Export as JSON" exporting Markdown)."""
    window = make_window(ScriptedEngineDouble(), start=False)
    ran: list[str] = []
    for action_id, action in window.menus.table.items():  # spies in place of the handlers, by id
        window.menus.table[action_id] = type(action)(action.id, action.title, action.menu,
                                                     lambda _w, key=action_id: ran.append(key), action.shortcut,
                                                     action.fallback)
    reached = []
    for menu in window.menuBar().actions():
        assert menu.text().replace("&", "") in MENUS
        for entry in menu.menu().actions():
            ran.clear()
            entry.trigger()
            assert ran == [entry.objectName()], f"{entry.text()} ran {ran}"
            reached.append(entry.objectName())
    assert sorted(reached) == sorted(BY_ID), "each action exactly once in the menus"


def test_shortcuts_are_bound_as_the_table_says_and_no_two_share_one(qtbot, make_window) -> None:
    """Bug caught: two actions on one key (Qt then fires neither, "Ambiguous shortcut"), or a table shortcut
    that never reached its QAction."""
    window = make_window(ScriptedEngineDouble(), start=False)
    keys = [action.keys().toString() for action in ACTIONS if not action.keys().isEmpty()]
    assert len(keys) == len(set(keys)), f"shared shortcuts: {sorted(k for k in keys if keys.count(k) > 1)}"
    for action in ACTIONS:
        assert window.menus.actions[action.id].shortcut() == action.keys(), action.id
    for wanted in ("stop", "regenerate", "focus_prompt", "send", "new_conversation", "settings", "quit"):
        assert not BY_ID[wanted].keys().isEmpty(), f"{wanted} has no shortcut"
    assert BY_ID["stop"].keys() == QKeySequence("Esc")


def test_escape_stops_a_streaming_reply(qtbot, make_window) -> None:
    """Bug caught: Stop reachable only by the mouse; Esc bound to an action that never reached the window."""
    slow = Script(["<think>"] + [f"thought {i} " for i in range(200)], tokens_per_second=5)
    window = make_window(ScriptedEngineDouble([slow]))
    wait_ready(qtbot, window)
    window.activateWindow()
    qtbot.waitUntil(lambda: window.isActiveWindow(), timeout=5_000)
    window.prompt.setPlainText("think slowly")
    window.menus.trigger("send")
    qtbot.waitUntil(lambda: window.chat_view.thinking_pane.text() != "", timeout=5_000)
    with qtbot.waitSignal(window.reply_finished, timeout=5_000) as blocker:
        QTest.keyClick(window.chat_view, Qt.Key.Key_Escape)
    assert blocker.args[0].reason == "abort"


def test_focus_prompt_and_new_conversation_keys_act_on_the_window(qtbot, make_window) -> None:
    """Bug caught: Ctrl+L and Ctrl+N listed but doing nothing (a handler that reached the wrong object)."""
    window = make_window(ScriptedEngineDouble())
    wait_ready(qtbot, window)
    window.activateWindow()
    qtbot.waitUntil(lambda: window.isActiveWindow(), timeout=5_000)
    window.conversation_list.list.setFocus()
    QTest.keySequence(window.conversation_list.list, BY_ID["focus_prompt"].keys())
    qtbot.waitUntil(lambda: window.prompt.hasFocus(), timeout=5_000)
    before = len(window.session.store.model)
    QTest.keySequence(window.prompt, BY_ID["new_conversation"].keys())
    qtbot.waitUntil(lambda: len(window.session.store.model) == before + 1, timeout=5_000)


def test_keyboard_shortcuts_lists_every_action_with_its_keys(qtbot, make_window) -> None:
    """Bug caught: a shortcut list written by hand that forgets the newest action or shows a stale key."""
    window = make_window(ScriptedEngineDouble(), start=False)
    dialog = window.dialogs.open_shortcuts(shortcut_rows())
    qtbot.waitExposed(dialog)
    shown = [tuple(dialog.table.item(r, c).text() for c in range(3)) for r in range(dialog.table.rowCount())]
    assert shown == shortcut_rows() and len(shown) == len(ACTIONS)
    assert ("Chat", "Stop", QKeySequence("Esc").toString(QKeySequence.SequenceFormat.NativeText)) in shown
    dialog.close()
