"""The window's actions as data, as napari declares its own (``_app_model/actions``): one table of id, title,
menu, shortcut and handler. The menus, the shortcuts, Help → Keyboard shortcuts, the tests and ``nalar bench
ui`` all read it, so an action added here is in the menu and the shortcut list at once, and a benchmark
triggers "send" by id instead of pressing a button.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtGui import QGuiApplication, QKeySequence

from app.ui.compare.compare_dialog import open_compare

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

MENUS = ("File", "Chat", "Engine", "Help")
Shortcut = str | QKeySequence.StandardKey


@dataclass(frozen=True)
class Action:
    """``handler`` gets the window; like a click, it does nothing where the action doesn't apply now."""

    id: str
    title: str  # with the menu's & mnemonic
    menu: str   # one of MENUS
    handler: Callable[[MainWindow], object]
    shortcut: Shortcut | None = None
    fallback: str | None = None  # where the platform has no standard key for ``shortcut``
    also: str | None = None  # another way in, where a widget handles the key itself (Help lists it)

    def keys(self) -> QKeySequence:
        """The shortcut on this platform (resolved only once Qt runs); empty for none."""
        keys = QKeySequence() if self.shortcut is None else QKeySequence(self.shortcut)
        return QKeySequence(self.fallback) if keys.isEmpty() and self.fallback else keys

    @property
    def label(self) -> str:
        return self.title.replace("&", "")


def _copy_answer(window: MainWindow) -> None:
    QGuiApplication.clipboard().setText(window.chat_view.answer_pane.text())


ACTIONS: tuple[Action, ...] = (
    Action("new_conversation", "&New conversation", "File", lambda w: w.session.store.new_conversation(),
           QKeySequence.StandardKey.New, fallback="Ctrl+N"),
    # Preferences has no standard key on Linux: Ctrl+, as Linux apps use.
    Action("settings", "&Settings…", "File", lambda w: w.menus.open_settings(), QKeySequence.StandardKey.Preferences,
           fallback="Ctrl+,"),
    Action("export_markdown", "Export conversation as &Markdown…", "File",
           lambda w: w.menus.export_conversation("md")),
    Action("export_json", "Export conversation as &JSON…", "File", lambda w: w.menus.export_conversation("json")),
    Action("import_conversations", "&Import conversations…", "File", lambda w: w.menus.import_conversations()),
    # Quit's standard key is empty under some platform themes (Qt's offscreen one among them).
    Action("quit", "&Quit", "File", lambda w: w.close(), QKeySequence.StandardKey.Quit, fallback="Ctrl+Q"),
    Action("search", "Searc&h conversations…", "Chat", lambda w: w.menus.open_search(), "Ctrl+K"),
    Action("send", "&Send", "Chat", lambda w: w.send(), "Ctrl+Return"),
    Action("stop", "S&top", "Chat", lambda w: w.session.stop(), "Esc"),
    Action("answer_now", "&Answer now", "Chat", lambda w: w.session.answer_now(), "Ctrl+Shift+Return"),
    Action("regenerate", "&Regenerate", "Chat", lambda w: w.session.regenerate(), "Ctrl+R"),
    # The last question under 2 to 4 variants at once, side by side (app/ui/compare).
    Action("compare", "Co&mpare…", "Chat", open_compare, "Ctrl+Shift+M"),
    # While the model thinks: stop it with the thinking pane editable, then go on from the edited text.
    Action("pause_thinking", "Pa&use the thinking", "Chat", lambda w: w.session.pause_thinking(), "Ctrl+P"),
    Action("resume_thinking", "Resu&me from the edited thinking", "Chat",
           lambda w: w.session.resume_thinking(w.chat_view.thinking_pane.edited_text()), "Ctrl+Shift+P"),
    Action("continue_answer", "C&ontinue the reply", "Chat", lambda w: w.session.continue_answer(), "Ctrl+Shift+R"),
    # The newest turn with other tries (usually the last reply): the window's "◀ ▶" without the mouse.
    Action("previous_branch", "&Previous branch", "Chat", lambda w: w.conversation_actions.switch_newest(-1),
           "Alt+Left"),
    Action("next_branch", "Ne&xt branch", "Chat", lambda w: w.conversation_actions.switch_newest(+1), "Alt+Right"),
    Action("edit_last_question", "&Edit the last question", "Chat", lambda w: w.conversation_actions.edit_last(),
           "Ctrl+Up", also="Up in an empty prompt"),
    Action("copy_answer", "&Copy answer", "Chat", _copy_answer, "Ctrl+Shift+C"),
    Action("focus_prompt", "&Focus the prompt", "Chat", lambda w: w.prompt.setFocus(), "Ctrl+L"),
    Action("rename_conversation", "Re&name conversation…", "Chat", lambda w: w.conversation_actions.rename(),
           "F2"),
    Action("delete_conversation", "&Delete conversation…", "Chat", lambda w: w.conversation_actions.delete()),
    Action("restart_engine", "&Restart engine", "Engine", lambda w: w.controller.start_engine()),
    Action("choose_model", "Choose &model…", "Engine", lambda w: w.menus.open_model_chooser()),
    Action("measure", "Measure &FP8…", "Engine", lambda w: w.menus.open_measure_dialog()),
    Action("keyboard_shortcuts", "&Keyboard shortcuts", "Help", lambda w: w.menus.open_shortcuts(), "F1"),
    Action("open_log_folder", "Open &log folder", "Help", lambda w: w.menus.open_log_folder()),
)
BY_ID = {action.id: action for action in ACTIONS}


def shortcut_rows() -> list[tuple[str, str, str]]:
    """(menu, title, shortcut) of every action, in menu order, as Help → Keyboard shortcuts lists them."""
    def keys(action: Action) -> str:
        text = action.keys().toString(QKeySequence.SequenceFormat.NativeText)
        return f"{text}, or {action.also}" if action.also else text

    return [(action.menu, action.label, keys(action)) for menu in MENUS for action in ACTIONS if action.menu == menu]
