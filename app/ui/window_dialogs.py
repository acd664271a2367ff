"""What the main window's menu entries open: Settings, the model chooser, Measure FP8…, Compare…, the search,
conversation export and import, the shortcut list and the log folder. The dialogs get the objects that own the
state (the engine controller, the chat session, the tool servers, the gauges), never the window's internals; each
dialog changes settings through ``EngineController.apply_settings``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QFileDialog, QMainWindow

from app.core.chat.history_import import Imported, ImportProblem, export_json, export_markdown
from app.core.chat.history_search import HistorySearch, SearchHit
from app.core.hub.queue import default_state_file as queue_state_file
from app.core.safe_files import safe_file_name
from app.core.settings import paths
from app.core.settings.settings import changed
from app.ui.chat.gauges import GaugeBar
from app.ui.chat.panes import ErrorBanner
from app.ui.compare.compare_dialog import CompareDialog
from app.ui.compare.compare_runner import CompareRunner
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.operations import Operation
from app.ui.controllers.tools_controller import ToolsController
from app.ui.dialogs.measure_dialog import MeasureDialog
from app.ui.dialogs.search_dialog import SearchDialog
from app.ui.dialogs.settings_dialog import SettingsDialog
from app.ui.dialogs.shortcuts_dialog import ShortcutsDialog
from app.ui.dialogs.welcome_dialog import WelcomeDialog
from app.ui.model_browser.browser_dialog import ModelBrowser
from app.ui.model_browser.models_hub import ModelsHub


class WindowDialogs(QObject):
    """The dialogs the menus open, as ``window``'s children. The window hands over the roles they work on, its
    error banner and notice line, and where a chosen search result goes (``open_hit``)."""

    def __init__(self, window: QMainWindow, controller: EngineController, session: ChatSession,
                 tools: ToolsController, gauges: GaugeBar, banner: ErrorBanner,
                 open_hit: Callable[[SearchHit], object], show_notice: Callable[[str], object]) -> None:
        super().__init__(window)
        self.window = window
        self.controller, self.session, self.tools, self.gauges = controller, session, tools, gauges
        self.banner, self.open_hit, self.show_notice = banner, open_hit, show_notice
        self.measure_dialog: MeasureDialog | None = None
        self.models: ModelsHub | None = None  # the download queue and the library, made when first needed
        if queue_state_file().exists():  # downloads an earlier session left: they resume now
            QTimer.singleShot(0, lambda: self.models_hub().resume_unfinished())
        # A slot of the status bar, not a lambda: emitted on the import's worker thread, it is queued to the GUI's.
        session.store.import_progress.connect(window.statusBar().showMessage)

    def open_shortcuts(self, rows: list[tuple[str, str, str]]) -> ShortcutsDialog:
        """Help → Keyboard shortcuts: ``rows`` are (menu, title, keys), as the action table lists them."""
        dialog = ShortcutsDialog(rows, parent=self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def open_search(self) -> SearchDialog:
        """Ctrl+K: the history's search; a chosen result opens its conversation at its message, on its branch."""
        history = self.session.history
        dialog = SearchDialog(lambda query, thinking: HistorySearch(history.path, query, thinking=thinking,
                                                                    busy_timeout_s=history.busy_timeout_s),
                              parent=self.window)
        dialog.chosen.connect(self.open_hit)
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
        """The welcome dialog; a chosen model is saved and the engine restarts on it. *More models…* hands over
        to the model browser.

        On first run, closing it without a choice saves and starts the embedded model, so it isn't asked again.
        """
        from app.engine.machine.capability import probe_hardware

        controller = self.controller
        dialog = WelcomeDialog(probe_hardware(), parent=self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(
            lambda: controller.apply_settings(controller.settings.with_engine(**dialog.engine_update)))
        handed_over: list[ModelBrowser] = []
        if first_run:
            dialog.rejected.connect(
                lambda: None if handed_over else controller.apply_settings(controller.settings.with_engine()))

        def more_models() -> None:
            handed_over.append(self.open_model_browser(first_run=first_run))
            dialog.reject()

        dialog.more_models.connect(more_models)
        dialog.open()
        return dialog

    def models_hub(self) -> ModelsHub:
        """The window's download queue, library and verdict cache: one per window, closed with it."""
        if self.models is None:
            self.models = ModelsHub(self)
        return self.models

    def open_model_browser(self, *, first_run: bool = False) -> ModelBrowser:
        """Engine → Choose model…: search, downloads, library. *Use* saves the model and restarts the engine on
        it, as the welcome dialog's choice does; on first run, closing it without a choice starts the embedded
        model."""
        controller = self.controller
        dialog = ModelBrowser(self.models_hub(), parent=self.window)
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

    def open_compare(self) -> CompareDialog | None:
        """Compare… on the shown chat's last question, when no reply runs and the engine is ready."""
        session, controller = self.session, self.controller
        conversation = session.conversation
        if session.streaming or not controller.engine_ready or not conversation.turns:
            self.show_notice("Compare needs a question in the chat, the engine ready and no reply running.")
            return None
        runner = CompareRunner(controller.bridge, session.history)
        sampling = changed(controller.settings.sampling, thinking=conversation.thinking)  # the chat's Think switch
        dialog = CompareDialog(runner, conversation, sampling, parent=self.window)
        runner.setParent(dialog)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(lambda _result: session.store.current_changed.emit(session.store.current_row))
        dialog.open()
        return dialog

    def close_all(self) -> None:
        """The window closes: the Measure dialog (it ends its jobs' process groups), a model browser (its search's
        threads) and the download queue."""
        if self.measure_dialog is not None:
            self.measure_dialog.close()
        for browser in self.window.findChildren(ModelBrowser):
            browser.reject()
            browser.search.wait()
        if self.models is not None:
            self.models.close()

    def export_conversation(self, kind: str, path: str | None = None) -> Path | None:
        conversation = self.session.conversation
        if path is None:
            # The title may come from an imported file: one plain name, never a path of its own.
            suggested = str(Path.home() / f"{safe_file_name(conversation.title[:40], 'conversation')}.{kind}")
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
        self.banner.show_problem(f"Import failed: {problem}", "Nothing was imported; the history is as it "
                                 "was. Fix the file, or choose another.")

    def open_log_folder(self) -> None:
        folder = paths.private_dir(paths.log_dir())
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
