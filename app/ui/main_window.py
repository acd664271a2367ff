"""MainWindow: conversations on the left; transcript, live thinking and answer panes, input and gauges.

Layout and wiring only: ``self.session`` (ChatSession) holds the conversations and the reply,
``self.controller`` (EngineController) the engine, the settings and the local API server, ``self.tools``
the tool servers, ``self.menus`` the dialogs. Tests, benches and dialogs use those objects and the widgets
that own their state (``chat_view``, ``controls``, ``status_bar``); the window forwards nothing.
"""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import QInputDialog, QMainWindow, QMessageBox, QSplitter, QVBoxLayout, QWidget
from qasync import asyncSlot

from app.core.chat.conversation import Conversation
from app.core.chat.history import HistoryStore
from app.core.models.model_families import model_family
from app.core.settings.keystore import KeyStore
from app.core.settings.settings import Settings
from app.engine.base import EngineBase
from app.engine.events import EngineReady, Finished, LoopDetected, StatusChanged
from app.ui.chat.chat_view import ChatView
from app.ui.chat.conversation_list import ConversationList
from app.ui.chat.gauges import GaugeBar
from app.ui.chat.panes import ErrorBanner, PromptEdit
from app.ui.chat.plain_text import plain_label
from app.ui.chat.reply_controls import ReplyControls
from app.ui.chat.status_bar import EngineStatusBar
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.tools_controller import ToolsController
from app.ui.window_menus import WindowMenus

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    """The window users live in. All engine traffic goes through the controller's bridge."""

    reply_finished = Signal(object)  # Finished, after the window has shown it (for tests and benches)

    def __init__(self, engine: EngineBase, settings: Settings, settings_notice: str | None = None,
                 history: HistoryStore | None = None, keys: KeyStore | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Nalar")
        self.resize(1280, 800)
        self.controller = EngineController(engine, settings, keys or KeyStore(),
                                           busy=lambda: self.session.streaming, parent=self)
        self.tools = ToolsController(self)  # the MCP servers of Settings → Tools, on their own thread
        self.session = ChatSession(self.controller, history or HistoryStore(), self, tools=self.tools)
        self._build_widgets()
        self.menus = WindowMenus(self, self.controller, self.session, self.tools, self.gauges)
        self._connect()
        self._connect_tools()
        self.session.load_history()
        self.refresh_state()
        if settings_notice:
            self.banner.show_problem("Settings were reset", settings_notice)
        if self.session.history.notice:
            self.banner.show_problem("History was reset", self.session.history.notice)

    # ---- construction ------------------------------------------------------------------------

    def _build_widgets(self) -> None:
        self.conversation_list = ConversationList(self.session.model)
        self.chat_view = ChatView()
        self.banner = ErrorBanner()
        self.notice_label = plain_label(word_wrap=True)  # notices quote servers, tools and files
        self.notice_label.setObjectName("NoticeLabel")
        self.notice_label.hide()
        self.prompt = PromptEdit()
        self.controls = ReplyControls()
        controls = self.controls

        center = QWidget()
        center_layout = QVBoxLayout(center)
        for widget, stretch in ((self.banner, 0), (self.chat_view, 1), (self.notice_label, 0), (self.prompt, 0),
                                (controls, 0)):
            center_layout.addWidget(widget, stretch)

        body = QSplitter(Qt.Orientation.Horizontal)
        body.addWidget(self.conversation_list)
        body.addWidget(center)
        body.setSizes([220, 1060])
        self.gauges = GaugeBar()
        root = QWidget()
        root_layout = QVBoxLayout(root)
        root_layout.setContentsMargins(6, 6, 6, 0)
        root_layout.addWidget(self.gauges)
        root_layout.addWidget(body, 1)
        self.setCentralWidget(root)

        self.status_bar = EngineStatusBar()
        self.setStatusBar(self.status_bar)

    def _connect(self) -> None:
        bridge, controller, session = self.controller.bridge, self.controller, self.session
        bridge.status_changed.connect(self.on_status)
        bridge.engine_ready.connect(self.on_engine_ready)
        bridge.metrics_updated.connect(self.gauges.update_metrics)
        bridge.notice.connect(self.show_notice)
        controller.starting.connect(self.on_engine_starting)
        controller.state_changed.connect(self.refresh_state)
        controller.failure.connect(self.banner.show_failure)
        controller.engine_stopped.connect(self.on_engine_stopped)
        controller.notice.connect(self.show_notice)
        controller.api_url_changed.connect(self.status_bar.show_api_url)
        session.current_changed.connect(self.show_conversation)
        session.reply_started.connect(self.on_reply_started)
        session.thinking_delta.connect(self.chat_view.thinking_pane.append)
        session.answer_started.connect(self.chat_view.start_answer)
        session.answer_delta.connect(self.chat_view.answer_pane.append)
        session.thinking_tokens.connect(self.chat_view.thinking_pane.set_tokens)
        session.backend_changed.connect(self.chat_view.set_backend)
        session.loop_detected.connect(self.on_loop_detected)
        self.chat_view.thinking_pane.continue_anyway.connect(session.continue_past_loop)
        session.notice.connect(self.show_notice)
        session.state_changed.connect(self.refresh_state)
        session.reply_finished.connect(self.on_reply_finished)
        self.prompt.submitted.connect(self.send)
        controls, answer_pane = self.controls, self.chat_view.answer_pane
        controls.send_button.clicked.connect(self.send)
        controls.think_switch.toggled.connect(session.set_thinking)
        controls.stop_button.clicked.connect(session.stop)
        controls.answer_now_button.clicked.connect(session.answer_now)
        controls.regenerate_button.clicked.connect(session.regenerate)
        controls.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(answer_pane.text()))
        self.banner.action_clicked.connect(controller.retry)
        lst = self.conversation_list
        lst.new_button.clicked.connect(session.new_conversation)
        lst.rename_button.clicked.connect(self.rename_conversation)
        lst.delete_button.clicked.connect(self.delete_conversation)
        lst.list.selectionModel().currentRowChanged.connect(lambda current, _: session.select(current.row()))

    def _connect_tools(self) -> None:
        session, panel, loop = self.session, self.chat_view.tool_panel, self.session.tool_loop
        assert loop is not None
        session.tool_round_started.connect(self.chat_view.show_tool_round)
        session.tool_step_changed.connect(panel.update_step)
        session.reply_continued.connect(self.chat_view.continue_reply)
        panel.run.connect(loop.approve)
        panel.always.connect(lambda step: loop.approve(step, always=True))
        panel.deny.connect(loop.deny)
        self.controls.tools_switch.toggled.connect(session.set_tools)
        self.tools.notice.connect(self.show_notice)
        controller = self.controller
        self.tools.servers_changed.connect(
            lambda: self.controls.tools_switch.show_tools(len(self.tools.offered(controller.settings.tools))))
        controller.settings_changed.connect(lambda before, after: self.tools.sync(after.tools.servers,
                                                                                  before.tools.servers))
        if controller.settings.tools.servers:  # once the UI loop runs: the window is built before qasync's loop starts
            QTimer.singleShot(0, lambda: self.tools.configure(controller.settings.tools.servers))

    # ---- state ---------------------------------------------------------------------------------

    def refresh_state(self) -> None:
        self.set_busy_state(engine_ready=self.controller.engine_ready, streaming=self.session.streaming)

    def set_busy_state(self, *, engine_ready: bool, streaming: bool) -> None:
        self.prompt.setEnabled(engine_ready and not streaming)
        session = self.session
        self.controls.set_state(engine_ready=engine_ready, streaming=streaming,
                                has_turns=bool(len(session.model) and session.conversation.turns),
                                has_answer=bool(self.chat_view.answer_pane.text()),
                                awaiting_tools=session.awaiting_tools)
        self.conversation_list.setEnabled(not streaming)
        self.menus.restart_action.setEnabled(not streaming)

    def on_engine_starting(self) -> None:
        self.banner.hide()
        self.gauges.set_engine(None)
        self.set_busy_state(engine_ready=False, streaming=False)

    def on_engine_stopped(self) -> None:
        self.status_bar.status_label.setText("engine stopped")
        self.gauges.set_engine(None)

    def on_status(self, status: StatusChanged) -> None:
        self.status_bar.show_status(status)
        if status.state in ("stopped", "failed"):
            self.gauges.set_engine(None)

    def on_engine_ready(self, ready: EngineReady) -> None:
        log.info("engine ready: %s · KV %s · %d tokens · loaded in %.1f s", ready.model, ready.kv_cache_dtype,
                 ready.kv_capacity_tokens, ready.load_seconds)
        self.gauges.set_engine(ready)
        self.controls.think_switch.show_family(model_family(ready.model))
        self.refresh_state()
        self.prompt.setFocus()

    def show_notice(self, text: str) -> None:
        self.notice_label.setText(text)
        self.notice_label.show()

    def show_conversation(self, row: int) -> None:
        if self.conversation_list.list.currentIndex().row() != row:
            self.conversation_list.select(row)
        conversation = self.session.model[row]
        self.controls.think_switch.show_chat(conversation.thinking)
        self.controls.tools_switch.show_chat(conversation.tools)
        self.chat_view.show_conversation(conversation)
        if conversation.turns and conversation.turns[-1].finish_reason == "interrupted":
            self.show_notice("This reply was interrupted: Nalar closed while it streamed. "
                             "Regenerate to get a complete one.")
        self.refresh_state()

    # ---- conversations -------------------------------------------------------------------------

    def rename_conversation(self) -> None:
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=self.session.conversation.title)
        if ok and title.strip():
            self.session.rename(title.strip())

    def delete_conversation(self) -> None:
        conversation = self.session.conversation
        if conversation.turns and QMessageBox.question(
                self, "Delete conversation", f"Delete “{conversation.title}”?") != QMessageBox.StandardButton.Yes:
            return
        self.session.delete_current()

    # ---- a reply ---------------------------------------------------------------------------

    @asyncSlot()
    async def send(self, text: str | None = None) -> None:
        text = (text if isinstance(text, str) else self.prompt.toPlainText()).strip()
        if not text or self.session.streaming or not self.controller.engine_ready:
            return
        self.prompt.clear()
        await self.session.send(text)

    def on_reply_started(self, conversation: Conversation) -> None:
        self.notice_label.hide()
        self.banner.hide()
        self.chat_view.start_reply(conversation)

    def on_loop_detected(self, event: LoopDetected) -> None:
        cut = event.outcome != "warned"
        self.chat_view.thinking_pane.show_loop(event.summary(), event.start_char if cut and event.phase == "thinking"
                                               else None, event.copies)
        if cut and event.phase == "answer":
            self.chat_view.answer_pane.keep(event.kept_char)

    def on_reply_finished(self, finished: Finished) -> None:
        self.chat_view.finish_reply()
        self.refresh_state()
        self.reply_finished.emit(finished)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Abort what streams, shut the engine down (its processes too), then close."""
        if not self.controller.closing:
            self.hide()
            self.menus.close_measure_dialog()
            started = time.monotonic()
            self.session.close()
            self.tools.close()  # the tool servers' processes end with the window
            self.controller.close()
            self.session.history.close()
            log.info("window closed; engine shut down in %.1f s", time.monotonic() - started)
        event.accept()
