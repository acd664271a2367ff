"""The main window's menu bar, built from the action table (app.ui.actions), and what its entries open:
Settings, the model chooser, Measure FP8…, conversation export, the shortcut list and the log folder. The
dialogs get the objects that own the state (the engine controller, the chat session, the tool servers, the
gauges), never the window's internals; each dialog changes settings through ``EngineController.apply_settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import QFileDialog

from app.core.chat.history_import import ImportProblem, export_json, export_markdown
from app.core.settings import paths
from app.ui.actions import ACTIONS, BY_ID, MENUS, Action, shortcut_rows
from app.ui.chat.gauges import GaugeBar
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.operations import Operation
from app.ui.controllers.tools_controller import ToolsController
from app.ui.dialogs.measure_dialog import MeasureDialog
from app.ui.dialogs.search_dialog import SearchDialog
from app.ui.dialogs.settings_dialog import SettingsDialog
from app.ui.dialogs.shortcuts_dialog import ShortcutsDialog
from app.ui.dialogs.welcome_dialog import WelcomeDialog

if TYPE_CHECKING:
    from app.core.chat.history_import import Imported
    from app.ui.main_window import MainWindow


class WindowMenus(QObject):
    """The menu bar built from the action table (app.ui.actions); the dialogs it opens are ``window``'s children.

    ``actions`` holds each action's QAction by id; ``trigger(id)`` fires it as a click or its shortcut would.
    """

    def __init__(self, window: MainWindow, controller: EngineController, session: ChatSession,
                 tools: ToolsController, gauges: GaugeBar) -> None:
        super().__init__(window)
        self.window = window
        self.controller, self.session, self.tools, self.gauges = controller, session, tools, gauges
        self.measure_dialog: MeasureDialog | None = None
        self.table = dict(BY_ID)  # id → Action: what each QAction runs, looked up when it fires
        # A slot of the status bar, not a lambda: emitted on the import's worker thread, it is queued to the GUI's.
        session.store.import_progress.connect(window.statusBar().showMessage)
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
        qaction.triggered.connect(lambda _checked=False, key=action.id: self.table[key].handler(self.window))
        self.actions[action.id] = qaction
        return qaction

    def trigger(self, action_id: str) -> None:
        """Run an action by id through its QAction: a disabled one does nothing, as for the user."""
        self.actions[action_id].trigger()

    def open_shortcuts(self) -> ShortcutsDialog:
        dialog = ShortcutsDialog(shortcut_rows(), parent=self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def open_search(self) -> SearchDialog:
        """Ctrl+K: the history's search; a chosen result opens its conversation at its message, on its branch."""
        history = self.session.history
        dialog = SearchDialog(lambda query, thinking: history.search(query, thinking=thinking), parent=self.window)
        dialog.chosen.connect(self.window.conversation_actions.open_hit)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def open_settings(self) -> SettingsDialog:
        controller, tools = self.controller, self.tools
        ready = controller.bridge.ready
        dialog = SettingsDialog(controller.settings, parent=self.window, keys=controller.keys, tools=tools,
                                speculation=ready.speculation if ready is not None else ())
        dialog.applied.connect(controller.apply_settings)
        # Closed without saving: servers only tried in the Tools tab end.
        dialog.rejected.connect(lambda: tools.sync(controller.settings.tools.servers))
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def open_model_chooser(self, *, first_run: bool = False) -> WelcomeDialog:
        """The welcome dialog; a chosen model is saved and the engine restarts on it.

        On first run, closing it without a choice saves and starts the embedded model, so it isn't asked again.
        """
        from app.engine.machine.capability import probe_hardware

        controller = self.controller
        dialog = WelcomeDialog(probe_hardware(), parent=self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(
            lambda: controller.apply_settings(controller.settings.with_engine(**dialog.engine_update)))
        if first_run:
            dialog.rejected.connect(lambda: controller.apply_settings(controller.settings.with_engine()))
        dialog.open()
        return dialog

    def open_measure_dialog(self) -> MeasureDialog:
        """Non-modal; one at a time (its jobs own the machine's engine processes)."""
        if self.measure_dialog is None:
            self.measure_dialog = MeasureDialog(self.controller, self.session, self.gauges.set_saturation_profile,
                                                parent=self.window)
            self.measure_dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self.measure_dialog.destroyed.connect(lambda: setattr(self, "measure_dialog", None))
        self.measure_dialog.show()
        self.measure_dialog.activateWindow()
        return self.measure_dialog

    def close_measure_dialog(self) -> None:
        if self.measure_dialog is not None:
            self.measure_dialog.close()  # ends its jobs' process groups

    def export_conversation(self, kind: str, path: str | None = None) -> Path | None:
        conversation = self.session.conversation
        if path is None:
            suggested = str(Path.home() / f"{conversation.title[:40] or 'conversation'}.{kind}")
            path, _ = QFileDialog.getSaveFileName(self.window, "Export conversation", suggested,
                                                  "Markdown (*.md)" if kind == "md" else "JSON (*.json)")
            if not path:
                return None
        target = Path(path)
        target.write_text(export_markdown(conversation) if kind == "md" else export_json(conversation),
                          encoding="utf-8")
        self.window.statusBar().showMessage(f"Exported to {target}", 5000)
        return target

    def import_conversations(self, path: str | None = None) -> Operation[Imported] | None:
        """File → Import: a Nalar JSON export or a message list, read and stored off the GUI thread, its steps in
        the status bar; a bad file is named in the banner, and nothing is stored. None: no file chosen."""
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self.window, "Import conversations", str(Path.home()),
                                                  "JSON (*.json)")
            if not path:
                return None
        return self.session.store.import_file(Path(path)).success(
            lambda imported: self.window.statusBar().showMessage(
                f"Imported {len(imported.conversations)} conversation(s) from {path}", 5000)).failure(
            self._import_failed)

    def _import_failed(self, exc: Exception) -> None:
        """A refused file (ImportProblem names it and the item), or the history that could not store it."""
        self.window.statusBar().clearMessage()
        problem = str(exc) if isinstance(exc, ImportProblem) else f"the history could not store it ({exc})"
        self.window.banner.show_problem(f"Import failed: {problem}", "Nothing was imported; the history is as it "
                                        "was. Fix the file, or choose another.")

    def open_log_folder(self) -> None:
        folder = paths.log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
