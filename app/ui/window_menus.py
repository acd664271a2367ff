"""The main window's menu bar and what its entries open: Settings, the model chooser, Measure FP8…,
conversation export and the log folder. The menus get the objects that own the state (the engine
controller, the chat session, the tool servers, the gauges), never the window's internals; each dialog
changes settings through ``EngineController.apply_settings``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMainWindow

from app.core.chat.history import export_json, export_markdown
from app.core.settings import paths
from app.ui.chat.gauges import GaugeBar
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.tools_controller import ToolsController
from app.ui.dialogs.measure_dialog import MeasureDialog
from app.ui.dialogs.settings_dialog import SettingsDialog
from app.ui.dialogs.welcome_dialog import WelcomeDialog


class WindowMenus(QObject):
    """File, Engine and Help, built on ``window``'s menu bar; the dialogs they open are ``window``'s children."""

    def __init__(self, window: QMainWindow, controller: EngineController, session: ChatSession,
                 tools: ToolsController, gauges: GaugeBar) -> None:
        super().__init__(window)
        self.window = window
        self.controller, self.session, self.tools, self.gauges = controller, session, tools, gauges
        self.measure_dialog: MeasureDialog | None = None
        file_menu = window.menuBar().addMenu("&File")
        preferences = QKeySequence(QKeySequence.StandardKey.Preferences)  # empty on Linux: Ctrl+, as Linux apps use
        file_menu.addActions([
            self._action("&New conversation", session.store.new_conversation, QKeySequence.StandardKey.New),
            self._action("&Settings…", self.open_settings,
                         QKeySequence("Ctrl+,") if preferences.isEmpty() else preferences),
            self._action("Export conversation as &Markdown…", lambda: self.export_conversation("md")),
            self._action("Export conversation as &JSON…", lambda: self.export_conversation("json")),
            self._action("&Quit", window.close, QKeySequence.StandardKey.Quit)])
        engine_menu = window.menuBar().addMenu("&Engine")
        self.restart_action = self._action("&Restart engine", lambda: controller.start_engine())
        engine_menu.addActions([self.restart_action, self._action("Choose &model…", lambda: self.open_model_chooser()),
                                self._action("Measure &FP8…", lambda: self.open_measure_dialog())])
        window.menuBar().addMenu("&Help").addAction(self._action("Open &log folder", self.open_log_folder))

    def _action(self, text: str, slot: Callable[[], object],
                shortcut: QKeySequence | QKeySequence.StandardKey | None = None) -> QAction:
        action = QAction(text, self.window)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        return action

    def open_settings(self) -> SettingsDialog:
        controller, tools = self.controller, self.tools
        dialog = SettingsDialog(controller.settings, parent=self.window, keys=controller.keys, tools=tools)
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

    def open_log_folder(self) -> None:
        folder = paths.log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
