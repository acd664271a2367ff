"""The window's actions as data, as napari declares its own (``_app_model/actions``): one table of id, title,
menu, shortcut and handler, and the menu bar built from it. The menus, the shortcuts, Help → Keyboard shortcuts,
the tests and ``nalar bench ui`` all read it, so an action added here is in the menu and the shortcut list at
once, and a benchmark triggers "send" by id instead of pressing a button.

A handler gets ``WindowParts``: the objects the window built and hands over, not the window itself, so nothing
here imports the window back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QMainWindow

from app.ui.chat.chat_view import ChatView
from app.ui.chat.panes import PromptEdit
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.conversation_actions import ConversationActions
from app.ui.knowledge.window_knowledge import WindowKnowledge
from app.ui.window_dialogs import WindowDialogs

MENUS = ("File", "Chat", "Engine", "Help")
Shortcut = str | QKeySequence.StandardKey


@dataclass(frozen=True)
class WindowParts:
    """What the handlers act on, handed over by the window once it has built them: the roles that own the state,
    the widgets a key acts on, and the window's own send and close."""

    session: ChatSession
    controller: EngineController
    dialogs: WindowDialogs
    conversations: ConversationActions
    chat_view: ChatView
    prompt: PromptEdit
    knowledge: WindowKnowledge
    send: Callable[[], object]
    close: Callable[[], object]


@dataclass(frozen=True)
class Action:
    """``handler`` gets the window's parts; like a click, it does nothing where the action doesn't apply now."""

    id: str
    title: str  # with the menu's & mnemonic
    menu: str   # one of MENUS
    handler: Callable[[WindowParts], object]
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


def _copy_answer(parts: WindowParts) -> None:
    QGuiApplication.clipboard().setText(parts.chat_view.answer_pane.text())


ACTIONS: tuple[Action, ...] = (
    Action("new_conversation", "&New conversation", "File", lambda p: p.session.store.new_conversation(),
           QKeySequence.StandardKey.New, fallback="Ctrl+N"),
    # Preferences has no standard key on Linux: Ctrl+, as Linux apps use.
    Action("settings", "&Settings…", "File", lambda p: p.dialogs.open_settings(), QKeySequence.StandardKey.Preferences,
           fallback="Ctrl+,"),
    Action("export_markdown", "Export conversation as &Markdown…", "File",
           lambda p: p.dialogs.export_conversation("md")),
    Action("export_json", "Export conversation as &JSON…", "File", lambda p: p.dialogs.export_conversation("json")),
    Action("import_conversations", "&Import conversations…", "File", lambda p: p.dialogs.import_conversations()),
    # Quit's standard key is empty under some platform themes (Qt's offscreen one among them).
    Action("quit", "&Quit", "File", lambda p: p.close(), QKeySequence.StandardKey.Quit, fallback="Ctrl+Q"),
    Action("search", "Searc&h conversations…", "Chat", lambda p: p.dialogs.open_search(), "Ctrl+K"),
    # Folders of the user's own documents that a chat can ask over, cited [1], [2] (app/ui/knowledge).
    Action("knowledge", "&Knowledge…", "Chat", lambda p: p.knowledge.open_dialog(), "Ctrl+Shift+K"),
    Action("send", "&Send", "Chat", lambda p: p.send(), "Ctrl+Return"),
    Action("stop", "S&top", "Chat", lambda p: p.session.stop(), "Esc"),
    Action("answer_now", "&Answer now", "Chat", lambda p: p.session.answer_now(), "Ctrl+Shift+Return"),
    Action("regenerate", "&Regenerate", "Chat", lambda p: p.session.regenerate(), "Ctrl+R"),
    # The last question under 2 to 4 variants at once, side by side (app/ui/compare).
    Action("compare", "Co&mpare…", "Chat", lambda p: p.dialogs.open_compare(), "Ctrl+Shift+M"),
    # While the model thinks: stop it with the thinking pane editable, then go on from the edited text.
    Action("pause_thinking", "Pa&use the thinking", "Chat", lambda p: p.session.pause_thinking(), "Ctrl+P"),
    Action("resume_thinking", "Resu&me from the edited thinking", "Chat",
           lambda p: p.session.resume_thinking(p.chat_view.thinking_pane.edited_text()), "Ctrl+Shift+P"),
    Action("continue_answer", "C&ontinue the reply", "Chat", lambda p: p.session.continue_answer(), "Ctrl+Shift+R"),
    # The newest turn with other tries (usually the last reply): the window's "◀ ▶" without the mouse.
    Action("previous_branch", "&Previous branch", "Chat", lambda p: p.conversations.switch_newest(-1),
           "Alt+Left"),
    Action("next_branch", "Ne&xt branch", "Chat", lambda p: p.conversations.switch_newest(+1), "Alt+Right"),
    Action("edit_last_question", "&Edit the last question", "Chat", lambda p: p.conversations.edit_last(),
           "Ctrl+Up", also="Up in an empty prompt"),
    Action("copy_answer", "&Copy answer", "Chat", _copy_answer, "Ctrl+Shift+C"),
    Action("focus_prompt", "&Focus the prompt", "Chat", lambda p: p.prompt.setFocus(), "Ctrl+L"),
    Action("rename_conversation", "Re&name conversation…", "Chat", lambda p: p.conversations.rename(),
           "F2"),
    Action("delete_conversation", "&Delete conversation…", "Chat", lambda p: p.conversations.delete()),
    Action("restart_engine", "&Restart engine", "Engine", lambda p: p.controller.start_engine()),
    Action("choose_model", "Choose &model…", "Engine", lambda p: p.dialogs.open_model_browser()),
    Action("measure", "Measure &FP8…", "Engine", lambda p: p.dialogs.open_measure_dialog()),
    Action("keyboard_shortcuts", "&Keyboard shortcuts", "Help", lambda p: p.dialogs.open_shortcuts(shortcut_rows()),
           "F1"),
    Action("open_log_folder", "Open &log folder", "Help", lambda p: p.dialogs.open_log_folder()),
)
BY_ID = {action.id: action for action in ACTIONS}


def shortcut_rows() -> list[tuple[str, str, str]]:
    """(menu, title, shortcut) of every action, in menu order, as Help → Keyboard shortcuts lists them."""
    def keys(action: Action) -> str:
        text = action.keys().toString(QKeySequence.SequenceFormat.NativeText)
        return f"{text}, or {action.also}" if action.also else text

    return [(action.menu, action.label, keys(action)) for menu in MENUS for action in ACTIONS if action.menu == menu]


class WindowMenus(QObject):
    """The menu bar of ``window``, built from the table: ``actions`` holds each action's QAction by id, ``table``
    the Action each runs (looked up when it fires), and ``trigger(id)`` fires one as a click or its shortcut would."""

    def __init__(self, window: QMainWindow, parts: WindowParts) -> None:
        super().__init__(window)
        self.window, self.parts = window, parts
        self.table = dict(BY_ID)
        self.actions: dict[str, QAction] = {}
        for menu_name in MENUS:
            menu = window.menuBar().addMenu(f"&{menu_name}")
            for action in ACTIONS:
                if action.menu == menu_name:
                    menu.addAction(self._action(action))

    def _action(self, action: Action) -> QAction:
        qaction = QAction(action.title, self.window)
        qaction.setObjectName(action.id)
        qaction.setShortcut(action.keys())
        qaction.triggered.connect(lambda _checked=False, key=action.id: self.table[key].handler(self.parts))
        self.actions[action.id] = qaction
        return qaction

    def trigger(self, action_id: str) -> None:
        """Run an action by id through its QAction: a disabled one does nothing, as for the user."""
        self.actions[action_id].trigger()
