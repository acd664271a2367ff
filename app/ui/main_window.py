"""MainWindow: conversations on the left; transcript, live thinking and answer panes, input and gauges.

Layout and wiring only: ``self.session`` (ChatSession) holds the conversations (``session.store``) and the
reply (``session.reply``, which the chat view observes),
``self.controller`` (EngineController) the engine, the settings and the local API server, ``self.tools``
the tool servers, ``self.dialogs`` the dialogs, ``self.menus`` the menu bar and its actions by id. Tests, benches
and dialogs reach those objects and the widgets (``chat_view``, ``controls``, ``status_bar``) directly: the window
has no methods that only pass calls on. The window builds each part and hands it what it uses; no part imports
the window.
"""

from __future__ import annotations

import gc
import html
import logging
import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QHBoxLayout, QMainWindow, QSplitter, QVBoxLayout, QWidget
from qasync import asyncSlot

from app.core.chat.conversation import Conversation
from app.core.chat.history import HistoryStore
from app.core.models.model_families import model_family
from app.core.settings.keystore import KeyStore
from app.core.settings.settings import Settings
from app.engine.base import EngineBase
from app.engine.events import EngineReady, Finished, StatusChanged
from app.ui.actions import WindowMenus, WindowParts
from app.ui.chat.attachments_bar import AttachmentsBar, model_counter
from app.ui.chat.chat_view import ChatView
from app.ui.chat.conversation_list import ConversationList
from app.ui.chat.gauges import GaugeBar
from app.ui.chat.panes import ErrorBanner, PromptEdit
from app.ui.chat.plain_text import plain_label
from app.ui.chat.presets.binding import ChatSettingsBinding
from app.ui.chat.reply_controls import ReplyControls
from app.ui.chat.status_bar import EngineStatusBar
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.operations import OperationError, run_blocking, runner
from app.ui.controllers.tools_controller import ToolsController
from app.ui.conversation_actions import ConversationActions
from app.ui.knowledge.window_knowledge import WindowKnowledge
from app.ui.window_dialogs import WindowDialogs

log = logging.getLogger(__name__)


def freeze_startup_heap() -> None:
    """The objects alive when the first engine is ready (modules, widgets: about 70,000), left out of every
    later full collection, as the engine process and vLLM's own server do after their start. Else one such
    collection, at a moment the collector picks, walked them all mid-stream: 76 ms in one refresh."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


def read_tokenizer_soon(settings: Settings, parent: QWidget) -> None:
    """The model's tokenizer read now, on a worker thread: the first send read it on the GUI thread to count the
    conversation, and froze 0.1-0.3 s."""
    counter = model_counter(settings)
    if counter.exact:
        run_blocking("Reading the model's tokenizer", lambda: counter.count(""), parent=parent).failure(
            lambda exc: log.warning("the model's tokenizer can't be read: %s", exc))


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
        # Rename, delete, the thread's links, branches.
        self.conversation_actions = ConversationActions(self.session, self.controller, self.chat_view, self.prompt,
                                                        self.gauges, self.show_notice, parent=self)
        self.dialogs = WindowDialogs(self, self.controller, self.session, self.tools, self.gauges, self.banner,
                                     self.conversation_actions.open_hit, self.show_notice)
        self.menus = WindowMenus(self, WindowParts(self.session, self.controller, self.dialogs,
                                                   self.conversation_actions, self.chat_view, self.prompt,
                                                   self.knowledge, send=self.send, close=self.close))
        _connect(self)
        _connect_conversations(self)
        _connect_tools(self)
        self.chat_settings = ChatSettingsBinding(self.controls, self.session, self.controller,
                                                 self.chat_view.thinking_pane)  # preset and budget per chat
        _connect_pause(self)
        self.session.store.load_history()
        self.refresh_state()
        if settings_notice:
            self.banner.show_problem("Settings were reset", settings_notice)
        if self.session.history.notice:
            self.banner.show_problem("History was reset", self.session.history.notice)

    # ---- construction ------------------------------------------------------------------------

    def _build_widgets(self) -> None:
        self.conversation_list = ConversationList(self.session.store.model)
        self.chat_view = ChatView()
        self.banner = ErrorBanner()
        self.notice_label = plain_label(word_wrap=True)  # notices quote servers, tools and files
        self.notice_label.setObjectName("NoticeLabel")
        self.notice_label.hide()
        self.prompt = PromptEdit()
        self.attachments = AttachmentsBar()
        self.controls = ReplyControls()
        self.gauges = GaugeBar()
        self.status_bar = EngineStatusBar()
        # The chat's collections (chip), the look-up before a send, the sources under the answer, Knowledge…
        self.knowledge = WindowKnowledge(self.session, self.controller, (
            self.chat_view.answer_pane.document, self.chat_view.transcript_document), self)
        _lay_out(self)

    # ---- state ---------------------------------------------------------------------------------

    def refresh_state(self) -> None:
        self.set_busy_state(engine_ready=self.controller.engine_ready, streaming=self.session.streaming)

    def set_busy_state(self, *, engine_ready: bool, streaming: bool) -> None:
        self.prompt.setEnabled(engine_ready and not streaming)
        session = self.session
        self.controls.set_state(engine_ready=engine_ready, streaming=streaming,
                                has_turns=bool(session.store.last_turn), has_answer=bool(session.reply.answer),
                                awaiting_tools=session.awaiting_tools, can_continue=session.can_continue,
                                can_pause=session.can_pause and session.pause.state == "off",
                                paused=session.pause.paused, pause_reason=session.pause_reason)
        self.conversation_list.setEnabled(not streaming)
        self.menus.actions["restart_engine"].setEnabled(not streaming)

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
        QTimer.singleShot(0, freeze_startup_heap)  # from the loop, not inside the signal's delivery
        read_tokenizer_soon(self.controller.settings, self)
        self.attachments.set_model(ready)
        self.conversation_actions.show_context()
        self.controls.show_family(model_family(ready.model), self.controller.settings.sampling.reasoning_effort)
        self.refresh_state()
        self.prompt.setFocus()

    def show_operation_error(self, error: OperationError) -> None:
        self.banner.show_problem(html.escape(error.message), html.escape(error.fix))  # exception text is plain

    def show_notice(self, text: str) -> None:
        self.notice_label.setText(text)
        self.notice_label.show()

    def show_conversation(self, row: int) -> None:
        if self.conversation_list.list.currentIndex().row() != row:
            self.conversation_list.select(row)
        conversation = self.session.store.read(row)
        self.controls.think_switch.show_chat(conversation.thinking)
        self.controls.tools_switch.show_chat(conversation.tools)
        self.chat_view.show_conversation(conversation)
        self.conversation_actions.show_context()
        if conversation.turns and conversation.turns[-1].finish_reason == "interrupted":
            self.show_notice("This reply was interrupted: Nalar closed while it streamed. "
                             "Regenerate to get a complete one.")
        self.refresh_state()

    # ---- a reply ---------------------------------------------------------------------------

    @asyncSlot()
    async def send(self, text: str | None = None) -> None:
        typed = text = (text if isinstance(text, str) else self.prompt.toPlainText()).strip()
        if not text or self.session.streaming or not self.controller.engine_ready or self.knowledge.busy \
                or self.attachments.still_reading():
            return  # a PDF still being read: the bar says so, and the question stays
        if self.attachments.attachments:
            question = self.attachments.question(text)
            refusal = await self.attachments.refusal(self.controller.settings, self.session.conversation, question)
            if refusal is not None:  # refused before anything is sent; the question and the files stay
                self.banner.show_problem("The files don't fit the context", refusal)
                return
            text = question
        conversation = self.session.conversation  # the chat's collections' passages, looked up off the GUI thread
        knowledge = await self.knowledge.asking.look_up(conversation, self.controller.settings, typed, text)
        if self.session.conversation is not conversation or self.session.streaming:
            return  # another chat was opened meanwhile: the question stays in the prompt
        images = tuple(self.attachments.images)
        self.prompt.clear()
        self.attachments.clear()
        await self.session.send(text, self.session.question_edit.take(), images, knowledge)  # an edit: a new branch

    def attach(self, paths: list[Path]) -> None:
        self.attachments.counter = model_counter(self.controller.settings)
        self.attachments.add_paths(paths)

    def on_reply_started(self, conversation: Conversation) -> None:
        self.notice_label.hide()
        self.banner.hide()
        self.chat_view.start_reply(conversation)

    def on_reply_finished(self, finished: Finished) -> None:
        self.refresh_state()
        self.reply_finished.emit(finished)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Abort what streams, shut the engine down (its processes too), then close."""
        if not self.controller.closing:
            self.hide()
            self.dialogs.close_all()  # the Measure dialog's jobs, the download queue
            started = time.monotonic()
            self.session.close()
            self.tools.close()  # the tool servers' processes end with the window
            self.attachments.pdfs.cancel()  # and a PDF's reader
            if self.knowledge.dialog is not None:
                self.knowledge.dialog.reject()  # and a knowledge sync, at its next file
            self.controller.close()
            self.session.history.close()
            log.info("window closed; engine shut down in %.1f s", time.monotonic() - started)
        event.accept()


def _connect(window: MainWindow) -> None:
    """The engine's, the session's and the widgets' signals to the parts that act on them."""
    bridge, controller, session = window.controller.bridge, window.controller, window.session
    bridge.status_changed.connect(window.on_status)
    bridge.engine_ready.connect(window.on_engine_ready)
    bridge.metrics_updated.connect(window.gauges.update_metrics)
    bridge.notice.connect(window.show_notice)
    controller.starting.connect(window.on_engine_starting)
    controller.state_changed.connect(window.refresh_state)
    controller.failure.connect(window.banner.show_failure)
    controller.engine_stopped.connect(window.on_engine_stopped)
    controller.notice.connect(window.show_notice)
    controller.api_url_changed.connect(window.status_bar.show_api_url)
    runner().unhandled.connect(window.show_operation_error)
    store = session.store
    store.current_changed.connect(window.show_conversation)
    session.reply_started.connect(window.on_reply_started)
    window.chat_view.observe(session.reply)
    window.chat_view.thinking_pane.continue_anyway.connect(session.continue_past_loop)
    session.notice.connect(window.show_notice)
    session.state_changed.connect(window.refresh_state)
    session.reply_finished.connect(window.on_reply_finished)
    window.prompt.submitted.connect(window.send)
    window.prompt.files_given.connect(window.attach)
    window.attachments.choose.connect(window.attach)
    window.attachments.refused.connect(lambda problem, fix: window.banner.show_problem(problem, fix))
    controls = window.controls
    controls.send_button.clicked.connect(window.send)
    controls.think_switch.toggled.connect(lambda on: store.set_switches(thinking=on))
    controls.effort_choice.chosen.connect(controller.set_reasoning_effort)
    controls.stop_button.clicked.connect(session.stop)
    controls.answer_now_button.clicked.connect(session.answer_now)
    controls.regenerate_button.clicked.connect(session.regenerate)
    controls.continue_button.clicked.connect(session.continue_answer)
    controls.copy_button.clicked.connect(lambda: window.menus.trigger("copy_answer"))
    window.banner.action_clicked.connect(controller.retry)
    lst = window.conversation_list
    lst.new_button.clicked.connect(store.new_conversation)
    lst.rename_button.clicked.connect(window.conversation_actions.rename)
    lst.delete_button.clicked.connect(window.conversation_actions.delete)
    lst.list.selectionModel().currentRowChanged.connect(lambda current, _: store.select(current.row()))


def _lay_out(window: MainWindow) -> None:
    """Conversations left of the transcript, prompt and controls; the gauges above both."""
    files = QWidget()  # the files of the next question, and the chat's knowledge chip, just above the prompt
    files_row = QHBoxLayout(files)
    files_row.setContentsMargins(0, 0, 0, 0)
    files_row.addWidget(window.attachments, 1)
    files_row.addWidget(window.knowledge.chip)
    center = QWidget()
    center_layout = QVBoxLayout(center)
    for widget, stretch in ((window.banner, 0), (window.chat_view, 1), (window.knowledge.sources, 0),
                            (window.notice_label, 0), (files, 0), (window.prompt, 0),
                            (window.controls, 0)):
        center_layout.addWidget(widget, stretch)
    body = QSplitter(Qt.Orientation.Horizontal)
    body.addWidget(window.conversation_list)
    body.addWidget(center)
    body.setSizes([220, 1060])
    root = QWidget()
    root_layout = QVBoxLayout(root)
    root_layout.setContentsMargins(6, 6, 6, 0)
    root_layout.addWidget(window.gauges)
    root_layout.addWidget(body, 1)
    window.setCentralWidget(root)
    window.setStatusBar(window.status_bar)


def _connect_tools(window: MainWindow) -> None:
    """The tool panel's approvals, the tools switch and the tool servers' notices and settings."""
    session, panel, loop = window.session, window.chat_view.tool_panel, window.session.tool_loop
    assert loop is not None
    panel.run.connect(loop.approve)
    panel.always.connect(lambda step: loop.approve(step, always=True))
    panel.deny.connect(loop.deny)
    window.controls.tools_switch.toggled.connect(lambda on: session.store.set_switches(tools=on))
    window.tools.notice.connect(window.show_notice)
    controller = window.controller
    window.tools.servers_changed.connect(
        lambda: window.controls.tools_switch.show_tools(len(window.tools.offered(controller.settings.tools))))
    controller.settings_changed.connect(
        lambda before, after: window.tools.sync(after.tools.servers, before.tools.servers))
    if controller.settings.tools.servers:  # once the UI loop runs: the window is built before qasync's loop starts
        QTimer.singleShot(0, lambda: window.tools.configure(controller.settings.tools.servers))


def _connect_conversations(window: MainWindow) -> None:
    """A question being edited: the controls show it, Cancel and Up in an empty prompt reach the conversation
    actions."""
    actions = window.conversation_actions
    window.session.question_edit.changed.connect(window.controls.show_editing)
    window.controls.cancel_edit_button.clicked.connect(actions.cancel_edit)
    window.prompt.edit_last.connect(lambda: window.menus.trigger("edit_last_question"))


def _connect_pause(window: MainWindow) -> None:
    """Pause and Resume: the buttons, and the controls following the reply into its answer and the pause."""
    session, controls = window.session, window.controls
    controls.pause_button.clicked.connect(session.pause_thinking)
    controls.resume_button.clicked.connect(lambda: window.menus.trigger("resume_thinking"))
    session.reply.answer_started.connect(lambda _: window.refresh_state())  # Pause applies while it thinks
    session.pause.changed.connect(lambda _state: window.refresh_state())
    window.chat_view.observe_pause(session.pause)
