"""MainWindow: conversations on the left; transcript, live thinking and answer panes, input and gauges."""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.core import paths
from app.core.conversation import Conversation, Turn
from app.core.history import HistoryStore, export_json, export_markdown
from app.core.keystore import KeyStore
from app.core.model_families import model_family, sampling_warning, with_card_sampling
from app.core.settings import EngineConfig, SamplingConfig, Settings, save_settings
from app.engine.base import EngineBase
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import (
    BackendChosen,
    EngineErrorEvent,
    EngineReady,
    Finished,
    LoopDetected,
    Metrics,
    StatusChanged,
)
from app.engine.loop_thread import on_engine
from app.ui.bridge import EngineBridge
from app.ui.gauges import GaugeBar
from app.ui.measure_dialog import MeasureDialog
from app.ui.panes import AnswerPane, ErrorBanner, PromptEdit, ThinkingPane
from app.ui.settings_dialog import SettingsDialog
from app.ui.think_switch import ThinkSwitch
from app.ui.welcome_dialog import WelcomeDialog

if TYPE_CHECKING:
    from app.engine.api_server import LocalApiServer

log = logging.getLogger(__name__)
PARTIAL_SAVE_MS = 1000
HEALTH_POLL_MS = 1000


class ConversationList(QWidget):
    """New, rename, delete; the current row is the conversation shown."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = QListWidget()
        self.list.setObjectName("ConversationList")
        self.new_button = QPushButton("New")
        self.rename_button = QPushButton("Rename")
        self.delete_button = QPushButton("Delete")
        buttons = QHBoxLayout()
        for button in (self.new_button, self.rename_button, self.delete_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Conversations"))
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)


class MainWindow(QMainWindow):
    """The window users live in. All engine traffic goes through ``self.bridge``."""

    reply_finished = Signal(object)  # Finished, after the window has taken it in (for tests and history)

    def __init__(self, engine: EngineBase, settings: Settings, settings_notice: str | None = None,
                 history: HistoryStore | None = None, keys: KeyStore | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Nalar")
        self.resize(1280, 800)
        self.settings = settings
        self.bridge = EngineBridge(engine, self)
        self.keys = keys or KeyStore()
        self._engine_keys = self.keys.profile_changes  # a key changed since then: rebuild the engine
        self.api_server: LocalApiServer | None = None
        self.conversations: list[Conversation] = []
        self.current_request: str | None = None
        self._answer_started = False
        self._closing = False

        self.history = history or HistoryStore()
        self._partial_timer = QTimer(self)
        self._partial_timer.setInterval(PARTIAL_SAVE_MS)
        self._partial_timer.timeout.connect(self.save_partial)
        self._health_timer = QTimer(self)
        self._health_timer.setInterval(HEALTH_POLL_MS)
        self._health_timer.timeout.connect(self.check_engine_health)
        self._health_timer.start()
        self._death_reported = False
        self._pending_fallback: dict[str, object] = {}  # the setting the banner's retry button applies
        self.measure_dialog: MeasureDialog | None = None

        self._build_widgets()
        self._build_menus()
        self._connect()
        self._load_history()
        self.set_busy_state(engine_ready=False, streaming=False)
        if settings_notice:
            self.banner.show_problem("Settings were reset", settings_notice)
        if self.history.notice:
            self.banner.show_problem("History was reset", self.history.notice)

    # ---- construction ------------------------------------------------------------------------

    def _build_widgets(self) -> None:
        self.conversation_list = ConversationList()
        self.transcript = QTextBrowser()
        self.transcript.setObjectName("Transcript")
        self.transcript.setOpenExternalLinks(True)
        self.thinking_pane = ThinkingPane()
        self.answer_pane = AnswerPane()
        self.live_split = QSplitter(Qt.Orientation.Horizontal)
        self.live_split.addWidget(self.thinking_pane)
        self.live_split.addWidget(self.answer_pane)
        self.live_split.setSizes([1, 1])
        self.banner = ErrorBanner()
        self.notice_label = QLabel(wordWrap=True)
        self.notice_label.setObjectName("NoticeLabel")
        self.notice_label.hide()
        self.prompt = PromptEdit()
        self.send_button = QPushButton("Send")
        self.think_switch = ThinkSwitch()
        self.stop_button = QPushButton("Stop")
        self.answer_now_button = QPushButton("Answer now")
        self.answer_now_button.setToolTip("End thinking here and write the answer")
        self.regenerate_button = QPushButton("Regenerate")
        self.copy_button = QPushButton("Copy answer")
        buttons = QHBoxLayout()
        for button in (self.send_button, self.think_switch, self.stop_button, self.answer_now_button,
                       self.regenerate_button, self.copy_button):
            buttons.addWidget(button)
        buttons.addStretch(1)

        center = QWidget()
        center_layout = QVBoxLayout(center)
        center_layout.addWidget(self.banner)
        vertical = QSplitter(Qt.Orientation.Vertical)
        vertical.addWidget(self.transcript)
        vertical.addWidget(self.live_split)
        vertical.setSizes([300, 500])
        center_layout.addWidget(vertical, 1)
        center_layout.addWidget(self.notice_label)
        center_layout.addWidget(self.prompt)
        center_layout.addLayout(buttons)

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

        self.status_label = QLabel("starting…")
        self.status_progress = QProgressBar()
        self.status_progress.setMaximumWidth(200)
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.status_progress)
        self.api_label = QLabel()
        self.api_label.setObjectName("ApiServerStatus")
        self.statusBar().addPermanentWidget(self.api_label)

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        new_action = QAction("&New conversation", self, shortcut=QKeySequence(QKeySequence.StandardKey.New))
        new_action.triggered.connect(self.new_conversation)
        quit_action = QAction("&Quit", self, shortcut=QKeySequence(QKeySequence.StandardKey.Quit))
        quit_action.triggered.connect(self.close)
        preferences = QKeySequence(QKeySequence.StandardKey.Preferences)  # empty on Linux: Ctrl+, as Linux apps use
        settings_action = QAction("&Settings…", self,
                                  shortcut=QKeySequence("Ctrl+,") if preferences.isEmpty() else preferences)
        settings_action.triggered.connect(self.open_settings)
        export_md = QAction("Export conversation as &Markdown…", self)
        export_md.triggered.connect(lambda: self.export_conversation("md"))
        export_json = QAction("Export conversation as &JSON…", self)
        export_json.triggered.connect(lambda: self.export_conversation("json"))
        file_menu.addActions([new_action, settings_action, export_md, export_json, quit_action])
        engine_menu = self.menuBar().addMenu("&Engine")
        self.restart_action = QAction("&Restart engine", self)
        self.restart_action.triggered.connect(self.start_engine)
        engine_menu.addAction(self.restart_action)
        choose_model_action = QAction("Choose &model…", self)
        choose_model_action.triggered.connect(lambda: self.open_model_chooser())
        engine_menu.addAction(choose_model_action)
        measure_action = QAction("Measure &FP8…", self)
        measure_action.triggered.connect(lambda: self.open_measure_dialog())
        engine_menu.addAction(measure_action)
        help_menu = self.menuBar().addMenu("&Help")
        logs_action = QAction("Open &log folder", self)
        logs_action.triggered.connect(self.open_log_folder)
        help_menu.addAction(logs_action)

    def _connect(self) -> None:
        self.bridge.status_changed.connect(self.on_status)
        self.bridge.engine_ready.connect(self.on_engine_ready)
        self.bridge.thinking_delta.connect(self.on_thinking_delta)
        self.bridge.answer_delta.connect(self.on_answer_delta)
        self.bridge.metrics_updated.connect(self.on_metrics)
        self.bridge.notice.connect(self.show_notice)
        self.bridge.error.connect(self.on_engine_error)
        self.bridge.finished.connect(self.on_finished)
        self.bridge.backend_chosen.connect(self.on_backend_chosen)
        self.bridge.loop_detected.connect(self.on_loop_detected)
        self.prompt.submitted.connect(self.send)
        self.send_button.clicked.connect(self.send)
        self.think_switch.toggled.connect(self.set_chat_thinking)
        self.stop_button.clicked.connect(self.stop)
        self.answer_now_button.clicked.connect(self.answer_now)
        self.regenerate_button.clicked.connect(self.regenerate)
        self.copy_button.clicked.connect(self.copy_answer)
        self.banner.action_clicked.connect(self.on_banner_action)
        self.thinking_pane.fold_changed.connect(self.on_thinking_folded)
        self.thinking_pane.continue_anyway.connect(self.continue_past_loop)
        lst = self.conversation_list
        lst.new_button.clicked.connect(self.new_conversation)
        lst.rename_button.clicked.connect(self.rename_conversation)
        lst.delete_button.clicked.connect(self.delete_conversation)
        lst.list.currentRowChanged.connect(self.show_conversation)

    # ---- state ---------------------------------------------------------------------------------

    @property
    def conversation(self) -> Conversation:
        return self.conversations[max(0, self.conversation_list.list.currentRow())]

    @property
    def streaming(self) -> bool:
        return self.current_request is not None

    def set_busy_state(self, *, engine_ready: bool, streaming: bool) -> None:
        has_turns = bool(self.conversations and self.conversation.turns)
        self.prompt.setEnabled(engine_ready and not streaming)
        self.send_button.setEnabled(engine_ready and not streaming)
        self.stop_button.setEnabled(streaming)
        self.answer_now_button.setEnabled(streaming)
        self.regenerate_button.setEnabled(engine_ready and not streaming and has_turns)
        self.copy_button.setEnabled(bool(self.answer_pane.text()))
        self.conversation_list.setEnabled(not streaming)
        self.restart_action.setEnabled(not streaming)

    @property
    def engine_ready(self) -> bool:
        return self.bridge.ready is not None and not self.bridge.engine.engine_died()

    def _refresh_state(self) -> None:
        self.set_busy_state(engine_ready=self.engine_ready, streaming=self.streaming)

    def check_engine_health(self) -> None:
        """An engine process that dies while idle is noticed here, not at the next Send."""
        if self._death_reported or not self.bridge.engine.engine_died():
            return
        self._death_reported = True
        self.status_label.setText("engine stopped")
        self.gauges.set_engine(None)
        if not self.streaming:  # a streaming reply reports the death itself, with its partial text
            self._show_failure(EngineFailure(FailureKind.ENGINE_DIED, "The engine process stopped unexpectedly.",
                                             "Restart the engine; your conversations are kept."))
        self._refresh_state()

    # ---- engine lifecycle -------------------------------------------------------------------

    @asyncSlot()
    async def start_engine(self, config: EngineConfig | None = None) -> None:
        """Load (or reload) the engine with the current settings; input waits until it is ready."""
        config = config or self.settings.engine
        self._death_reported = False
        self.banner.hide()
        self.gauges.set_engine(None)
        self.set_busy_state(engine_ready=False, streaming=False)
        try:
            await self.bridge.start(config)
        except EngineFailure as failure:
            self._show_failure(failure)
        except Exception as exc:  # a bug, not a user problem: log it, still say something useful
            log.exception("engine start crashed")
            self._show_failure(EngineFailure(FailureKind.ENGINE_START_FAILED, f"The engine crashed: {exc}",
                                             "See the log folder (Help → Open log folder)."))
        self._refresh_state()

    def on_status(self, status: StatusChanged) -> None:
        self.status_label.setText(status.message)
        if status.state == "loading":
            self.status_progress.show()
            if status.progress is None:
                self.status_progress.setRange(0, 0)
            else:
                self.status_progress.setRange(0, 100)
                self.status_progress.setValue(int(status.progress * 100))
        else:
            self.status_progress.hide()
        if status.state in ("stopped", "failed"):
            self.gauges.set_engine(None)

    def on_engine_ready(self, ready: EngineReady) -> None:
        log.info("engine ready: %s · KV %s · %d tokens · loaded in %.1f s", ready.model, ready.kv_cache_dtype,
                 ready.kv_capacity_tokens, ready.load_seconds)
        self.gauges.set_engine(ready)
        self.think_switch.show_family(model_family(ready.model))
        self._refresh_state()
        self.prompt.setFocus()
        self.update_api_server()

    def _show_failure(self, failure: EngineFailure) -> None:
        self._pending_fallback = failure.fallback
        if failure.fallback:
            change = ", ".join(f"{k} = {v}" for k, v in failure.fallback.items())
            action = f"Retry with {change}"
        elif failure.kind in (FailureKind.ENGINE_DIED, FailureKind.NOT_READY, FailureKind.ENGINE_START_FAILED,
                              FailureKind.UNREACHABLE, FailureKind.TIMEOUT):
            action = "Restart engine"
        else:
            action = None
        self.banner.show_problem(failure.message, failure.fix, action)

    def on_banner_action(self) -> None:
        if self._pending_fallback:
            # The user accepted the suggested setting: keep it, as if chosen in Settings.
            self.settings.engine = self.settings.engine.model_copy(update=self._pending_fallback)
            save_settings(self.settings)
        self.start_engine()

    # ---- conversation ----------------------------------------------------------------------

    def _load_history(self) -> None:
        for conversation in self.history.conversations():
            self.conversations.append(conversation)
            self.conversation_list.list.addItem(QListWidgetItem(conversation.title))
        if not self.conversations:
            self.new_conversation()
        else:
            self.conversation_list.list.setCurrentRow(len(self.conversations) - 1)
        if self.history.interrupted:
            self.show_notice(f"{self.history.interrupted} reply(s) were cut off when Nalar last closed "
                             "unexpectedly; what had arrived is kept, marked “interrupted”.")

    def new_conversation(self) -> None:
        self.conversations.append(Conversation(thinking=self.settings.sampling.thinking))
        self.history.save_conversation(self.conversations[-1])
        item = QListWidgetItem(self.conversations[-1].title)
        self.conversation_list.list.addItem(item)
        self.conversation_list.list.setCurrentRow(len(self.conversations) - 1)

    def rename_conversation(self) -> None:
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=self.conversation.title)
        if ok and title.strip():
            self._set_title(title.strip())

    def _set_title(self, title: str) -> None:
        self.conversation.title = title
        self.conversation_list.list.currentItem().setText(title)
        self.history.save_conversation(self.conversation)

    def delete_conversation(self) -> None:
        row = self.conversation_list.list.currentRow()
        if row < 0:
            return
        if self.conversation.turns and QMessageBox.question(
                self, "Delete conversation", f"Delete “{self.conversation.title}”?") != QMessageBox.StandardButton.Yes:
            return
        self.history.delete_conversation(self.conversations.pop(row).id)
        self.conversation_list.list.takeItem(row)
        if not self.conversations:
            self.new_conversation()

    def show_conversation(self, row: int) -> None:
        if row < 0 or row >= len(self.conversations):
            return
        conversation = self.conversations[row]
        self.think_switch.show_chat(conversation.thinking)
        self.render_transcript(conversation, include_last=False)
        self.thinking_pane.clear()
        self.answer_pane.clear()
        if conversation.turns:
            last = conversation.turns[-1]
            self.thinking_pane.append(last.thinking)
            self.thinking_pane.set_tokens(last.thinking_tokens)
            self.answer_pane.append(last.answer)
            self.answer_pane.render_markdown()
            self.answer_pane.header.setText(f"Answer · via {last.backend}" if last.backend else "Answer")
            self.thinking_pane.set_folded(bool(last.answer))
            if last.finish_reason == "interrupted":
                self.show_notice("This reply was interrupted: Nalar closed while it streamed. "
                                 "Regenerate to get a complete one.")
        self._refresh_state()

    def render_transcript(self, conversation: Conversation, include_last: bool) -> None:
        turns = conversation.turns if include_last else conversation.turns[:-1]
        parts = []
        for turn in turns:
            parts.append(f"<p><b>You</b><br>{html.escape(turn.user).replace(chr(10), '<br>')}</p>")
            note = "" if turn.finish_reason in (None, "stop") else f" <i>({turn.finish_reason})</i>"
            if turn.backend:
                note = f" <small>via {html.escape(turn.backend)}</small>{note}"
            parts.append(f"<p><b>Nalar</b>{note}<br>{html.escape(turn.answer).replace(chr(10), '<br>')}</p><hr>")
        self.transcript.setHtml("".join(parts))
        self.transcript.setVisible(bool(parts))  # no empty box above the first reply
        self.transcript.verticalScrollBar().setValue(self.transcript.verticalScrollBar().maximum())

    # ---- a reply ---------------------------------------------------------------------------

    @asyncSlot()
    async def send(self, text: str | None = None) -> None:
        text = (text if isinstance(text, str) else self.prompt.toPlainText()).strip()
        if not text or self.streaming or not self.engine_ready:
            return
        self.prompt.clear()
        conversation = self.conversation
        conversation.turns.append(Turn(user=text))
        if len(conversation.turns) == 1:
            conversation.title_from_first_message()
            self._set_title(conversation.title)
        await self._run_reply(conversation)

    def set_chat_thinking(self, on: bool) -> None:
        self.conversation.thinking = on
        self.history.save_conversation(self.conversation)

    @asyncSlot()
    async def regenerate(self) -> None:
        conversation = self.conversation
        if self.streaming or not conversation.turns or not self.engine_ready:
            return
        last = conversation.turns[-1]
        conversation.turns[-1] = Turn(user=last.user)
        await self._run_reply(conversation)

    @asyncSlot()
    async def continue_past_loop(self) -> None:
        """The repetition was wanted: answer the last message again with the loop guard only warning."""
        if self.streaming or not self.conversation.turns or not self.engine_ready:
            return
        self.conversation.turns[-1] = Turn(user=self.conversation.turns[-1].user)
        await self._run_reply(self.conversation, self.settings.sampling.with_loop_guard(action="warn"))

    async def _run_reply(self, conversation: Conversation, sampling: SamplingConfig | None = None) -> None:
        request_id = uuid.uuid4().hex[:12]
        self.current_request = request_id
        self._answer_started = False
        self.notice_label.hide()
        self.banner.hide()
        self.render_transcript(conversation, include_last=False)
        self.thinking_pane.clear()
        self.answer_pane.clear()
        turn = conversation.turns[-1]
        ready = self.bridge.ready
        turn.model, turn.kv_cache_dtype = (ready.model, ready.kv_cache_dtype) if ready else ("", "")
        self._show_backend(turn, self.bridge.engine.backend_name)
        self.history.start_turn(conversation, turn)
        self._partial_timer.start()
        self._refresh_state()
        try:
            # This chat's Think switch, on whatever sampling this reply runs with (Continue anyway: guard warns).
            sampling = SamplingConfig.model_validate({**(sampling or self.settings.sampling).model_dump(),
                                                      "thinking": conversation.thinking})
            if warning := sampling_warning(sampling, model_family(ready.model if ready else "")):
                self.show_notice(warning)
            await self.bridge.generate(conversation.messages(), sampling, request_id)
        except Exception as exc:  # the engine thread itself failed: still end the turn cleanly
            log.exception("generation crashed")
            self.bridge.post(EngineErrorEvent(request_id, EngineFailure(
                FailureKind.ENGINE_DIED, f"The engine failed: {exc}", "Restart the engine.")))
            self.bridge.post(Finished(request_id, "error", self.thinking_pane.text(), self.answer_pane.text()))

    @asyncSlot()
    async def stop(self) -> None:
        if self.current_request:
            await self.bridge.abort(self.current_request)

    def answer_now(self) -> None:
        if self.current_request:
            self.bridge.answer_now(self.current_request)

    def copy_answer(self) -> None:
        QGuiApplication.clipboard().setText(self.answer_pane.text())

    def on_thinking_delta(self, request_id: str, text: str) -> None:
        if request_id == self.current_request:
            self.thinking_pane.append(text)

    def on_answer_delta(self, request_id: str, text: str) -> None:
        if request_id != self.current_request:
            return
        if not self._answer_started:
            self._answer_started = True
            self.thinking_pane.end()
            if self.thinking_pane.text():
                self.thinking_pane.set_folded(True)  # the answer takes the room; the trace is one click away
        self.answer_pane.append(text)

    def on_metrics(self, metrics: Metrics) -> None:
        self.gauges.update_metrics(metrics)
        if metrics.request_id == self.current_request:
            self.thinking_pane.set_tokens(metrics.thinking_tokens)

    def _show_backend(self, turn: Turn, backend: str) -> None:
        turn.backend = backend
        self.answer_pane.header.setText(f"Answer · via {backend}")

    def on_backend_chosen(self, event: BackendChosen) -> None:
        if event.request_id != self.current_request or not self.conversation.turns:
            return
        self._show_backend(self.conversation.turns[-1], event.backend)
        if event.reason:
            self.show_notice(f"Answered by {event.backend}: {event.reason}.")

    def on_thinking_folded(self, folded: bool) -> None:
        """A folded trace shrinks to its header so the answer gets the room."""
        total = sum(self.live_split.sizes()) or self.live_split.width()
        folded_width = 180
        self.live_split.setSizes([folded_width, total - folded_width] if folded else [total // 2, total - total // 2])

    def on_loop_detected(self, event: LoopDetected) -> None:
        if event.request_id != self.current_request:
            return
        cut = event.outcome != "warned"
        self.thinking_pane.show_loop(event.summary(), event.start_char if cut and event.phase == "thinking"
                                     else None, event.copies)
        if cut and event.phase == "answer":
            self.answer_pane.keep(event.kept_char)

    def show_notice(self, text: str) -> None:
        self.notice_label.setText(text)
        self.notice_label.show()

    def on_engine_error(self, event: EngineErrorEvent) -> None:
        self._show_failure(event.failure)

    def on_finished(self, finished: Finished) -> None:
        if finished.request_id != self.current_request:
            return
        self.current_request = None
        self.thinking_pane.end()
        self.answer_pane.render_markdown()
        turn = self.conversation.turns[-1]
        turn.thinking, turn.answer, turn.finish_reason = finished.thinking_text, finished.answer_text, finished.reason
        turn.loop_guard = "\n".join(loop.summary() for loop in finished.loops)
        if finished.metrics is not None:
            m = finished.metrics
            turn.thinking_tokens, turn.answer_tokens, turn.ttft_s = m.thinking_tokens, m.answer_tokens, m.ttft_s
            turn.answer_tok_s = m.answer_tok_s
            self.thinking_pane.set_tokens(m.thinking_tokens)
        self._partial_timer.stop()
        self.history.finish_turn(turn)
        if finished.reason == "abort":
            self.show_notice("Stopped. The partial reply is kept.")
        elif finished.reason == "loop":
            self.show_notice("The loop guard cut this reply where it began to repeat itself.")
        self._refresh_state()
        self.reply_finished.emit(finished)

    def save_partial(self) -> None:
        """Every second while a reply streams: a crash then loses at most about a second of it."""
        if self.streaming and self.conversation.turns:
            self.history.save_partial(self.conversation.turns[-1], self.thinking_pane.text(), self.answer_pane.text())

    # ---- settings ------------------------------------------------------------------------------

    def open_settings(self) -> SettingsDialog:
        dialog = SettingsDialog(self.settings, parent=self, keys=self.keys)
        dialog.applied.connect(self.apply_settings)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def open_model_chooser(self, *, first_run: bool = False) -> WelcomeDialog:
        """The welcome dialog; a chosen model is saved and the engine restarts on it.

        On first run, closing it without a choice saves and starts the embedded model, so it isn't asked again.
        """
        from app.engine.capability import probe_hardware

        dialog = WelcomeDialog(probe_hardware(), parent=self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def chosen() -> None:
            engine = EngineConfig.model_validate({**self.settings.engine.model_dump(), **dialog.engine_update})
            self.apply_settings(self.settings.model_copy(update={"engine": engine}))

        dialog.accepted.connect(chosen)
        if first_run:
            dialog.rejected.connect(lambda: self.apply_settings(self.settings.model_copy()))
        dialog.open()
        return dialog

    def open_measure_dialog(self) -> MeasureDialog:
        """Non-modal; one at a time (its jobs own the machine's engine processes)."""
        if self.measure_dialog is None:
            self.measure_dialog = MeasureDialog(self)
            self.measure_dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self.measure_dialog.destroyed.connect(lambda: setattr(self, "measure_dialog", None))
        self.measure_dialog.show()
        self.measure_dialog.activateWindow()
        return self.measure_dialog

    def apply_settings(self, settings: Settings) -> None:
        """Save; restart the engine (keeping the conversation) only if an engine or backend setting changed."""
        if settings.engine.model != self.settings.engine.model:  # a model was chosen: its card's sampling
            settings = settings.model_copy(update={"sampling": with_card_sampling(
                settings.sampling, model_family(settings.engine.model))})
        switch = settings.backends != self.settings.backends or self.keys.profile_changes != self._engine_keys
        restart = switch or settings.engine != self.settings.engine or self.bridge.ready is None
        self.settings = settings
        save_settings(settings)
        if switch and not self.streaming:
            from app.engine.backends import build_engine

            self._engine_keys = self.keys.profile_changes
            self.switch_engine(build_engine(settings.backends, self.keys))
        elif restart and not self.streaming:
            self.start_engine(settings.engine)
        else:
            self.update_api_server()

    @asyncSlot()
    async def switch_engine(self, engine: EngineBase) -> None:
        """Shut the old backend down (its processes too), then start the new one."""
        old = self.bridge.engine
        self.set_busy_state(engine_ready=False, streaming=False)
        await self._stop_api_server()
        await on_engine(old.loop_thread, old.shutdown())
        await asyncio.get_running_loop().run_in_executor(None, old.close)
        self.bridge.set_engine(engine)
        await self.start_engine(self.settings.engine)

    # ---- local API server ----------------------------------------------------------------------

    @asyncSlot()
    async def update_api_server(self) -> None:
        """Run the local API server when it is on and an engine is ready; restart it on a new port."""
        wanted = self.settings.api_server
        server = self.api_server
        if server is not None and (not wanted.enabled or server.port != wanted.port
                                   or server.engine is not self.bridge.engine):
            await self._stop_api_server()
        if not wanted.enabled or self.api_server is not None or self.bridge.ready is None:
            return
        from app.engine.api_server import LocalApiServer  # aiohttp: only when the user turns the server on

        engine = self.bridge.engine
        server = LocalApiServer(engine, self.keys.api_server_token(), wanted.port, self.settings.sampling)
        try:
            await on_engine(engine.loop_thread, server.start())
        except OSError as exc:
            self.show_notice(f"The local API server could not listen on 127.0.0.1:{wanted.port} ({exc.strerror}). "
                             "Choose another port in Settings.")
            return
        self.api_server = server
        self.api_label.setText(f"API: {server.url}")

    async def _stop_api_server(self) -> None:
        server, self.api_server = self.api_server, None
        self.api_label.setText("")
        if server is not None and server.engine.loop_thread.alive:
            await on_engine(server.engine.loop_thread, server.stop())

    # ---- misc ----------------------------------------------------------------------------------

    def export_conversation(self, kind: str, path: str | None = None) -> Path | None:
        conversation = self.conversation
        if path is None:
            suggested = str(Path.home() / f"{conversation.title[:40] or 'conversation'}.{kind}")
            path, _ = QFileDialog.getSaveFileName(self, "Export conversation", suggested,
                                                  "Markdown (*.md)" if kind == "md" else "JSON (*.json)")
            if not path:
                return None
        target = Path(path)
        target.write_text(export_markdown(conversation) if kind == "md" else export_json(conversation),
                          encoding="utf-8")
        self.statusBar().showMessage(f"Exported to {target}", 5000)
        return target

    def open_log_folder(self) -> None:
        folder = paths.log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))

    def closeEvent(self, event: QCloseEvent) -> None:
        """Abort what streams, shut the engine down (its processes too), then close."""
        if not self._closing:
            self._closing = True
            self.hide()
            if self.measure_dialog is not None:
                self.measure_dialog.close()  # ends its jobs' process groups
            self._partial_timer.stop()
            self._health_timer.stop()
            if self.current_request:
                self.bridge.engine.loop_thread.submit(self.bridge.engine.abort(self.current_request))
                turn = self.conversation.turns[-1]
                turn.thinking, turn.answer = self.thinking_pane.text(), self.answer_pane.text()
                turn.finish_reason = "abort"
                self.history.finish_turn(turn)
                self.current_request = None  # late events from the engine are ignored
            started = time.monotonic()
            if self.api_server is not None and self.bridge.engine.loop_thread.alive:
                with contextlib.suppress(Exception):
                    self.bridge.engine.loop_thread.submit(self.api_server.stop()).result(5)
                self.api_server = None
            self.bridge.close(timeout=10)
            self.history.close()
            log.info("window closed; engine shut down in %.1f s", time.monotonic() - started)
        event.accept()
