"""ChatView: the conversation shown as a thread: earlier turns and the question above the live reply.

The live reply is the thinking pane over the answer pane, drawn from the session's ``Reply`` model, which
it observes (``observe``); when the answer starts, the trace folds into its one-line header and the answer
gets the whole width. A reply that calls tools shows its calls' cards between the two, and its further
thinking goes on in the thinking pane after a marker.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtWidgets import QSplitter, QTextBrowser, QVBoxLayout, QWidget

from app.core.chat.conversation import Conversation, ToolRound
from app.core.chat.reply import AFTER_TOOLS, LoopNote, Reply, ReplyState
from app.core.steering.kept_thinking import KeepSwitch
from app.core.steering.thinking_pause import PauseState, ThinkingPause
from app.ui.chat.answer_view import AnswerDocument, AnswerPane
from app.ui.chat.panes import ThinkingPane
from app.ui.chat.thread.markup import TURN_ACTIONS, TURN_SCHEME
from app.ui.chat.thread.pages import ThreadPages
from app.ui.chat.tool_cards import ToolCallsPanel

QWIDGETSIZE_MAX = (1 << 24) - 1  # Qt's "no maximum" for widget sizes
THREAD_REDRAW_MS = 150  # formulas drawn within this share one render of the thread


class ChatView(QWidget):
    """Shows a conversation and the reply streaming into its last turn.

    Its only state is which thread the transcript shows (conversation id, turns), so a send can append.
    A question's links (its branch navigator "◀ 2/3 ▶", Edit, New chat from here,
    Delete branch) emit ``turn_action``; the window acts on them.
    """

    turn_action = Signal(int, str)  # (index of the shown turn, one of TURN_ACTIONS)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.transcript = QTextBrowser()
        self.transcript.setObjectName("Transcript")
        self.transcript_document = AnswerDocument(self.transcript, self._redraw_thread)  # answers, maths, links
        self._thread_redraw = QTimer(self, singleShot=True, interval=THREAD_REDRAW_MS)
        self._thread_redraw.timeout.connect(self.redraw_thread)
        # Each earlier turn's "keep its thinking" switch with its cost (set by the window; none: no switches)
        self.keep_switches: Callable[[Conversation], list[KeepSwitch | None]] | None = None
        self.pages = ThreadPages(self.transcript, self.transcript_document, lambda conversation: (
            self.keep_switches(conversation) if self.keep_switches is not None else [None] * len(conversation.turns)))
        self.reply = Reply()  # until ``observe`` gives the session's
        self.thinking_pane = ThinkingPane(source=lambda: self.reply.trace)
        self.answer_pane = AnswerPane(source=lambda: self.reply.answer)
        self.tool_panel = ToolCallsPanel()
        self.live_split = QSplitter(Qt.Orientation.Vertical)
        self.live_split.addWidget(self.thinking_pane)
        self.live_split.addWidget(self.tool_panel)
        self.live_split.addWidget(self.answer_pane)
        self.live_split.setChildrenCollapsible(False)
        self.thread_split = QSplitter(Qt.Orientation.Vertical)
        self.thread_split.addWidget(self.transcript)
        self.thread_split.addWidget(self.live_split)
        self.thread_split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.thread_split)
        self.thinking_pane.fold_changed.connect(self.on_thinking_folded)
        self.transcript.anchorClicked.connect(self._on_anchor)

    def _on_anchor(self, url: QUrl) -> None:
        index, _, action = url.path().partition("/")
        if url.scheme() == TURN_SCHEME and action == "earlier":
            self.pages.earlier()
        elif url.scheme() == TURN_SCHEME and action == "latest":
            self.pages.newest()
        elif url.scheme() == TURN_SCHEME and index.isdigit() and action in TURN_ACTIONS:
            self.turn_action.emit(int(index), action)

    def observe(self, reply: Reply) -> None:
        """The live panes follow ``reply``: each of its changes is drawn as it happens."""
        self.reply = reply
        reply.reset.connect(lambda _: self.draw_reply())
        reply.thinking_added.connect(self.thinking_pane.append)
        reply.answer_started.connect(lambda _: self.start_answer())
        reply.answer_added.connect(self.answer_pane.append)
        reply.loop_noted.connect(self.show_loop)
        reply.round_added.connect(self.show_tool_round)
        reply.step_changed.connect(self.tool_panel.update_step)
        reply.continued.connect(lambda _: self.continue_reply())
        reply.tokens_counted.connect(self.thinking_pane.set_tokens)
        reply.backend_changed.connect(self.set_backend)
        reply.state_changed.connect(self._on_state)

    def observe_pause(self, pause: ThinkingPause) -> None:
        """Paused, the thinking pane is editable, unfolded, with the trace as plain text; else it reads only."""
        def on_pause(state: PauseState) -> None:
            if state == "paused":
                self.thinking_pane.set_folded(False)
            self.thinking_pane.set_editable(self.reply.trace if state == "paused" else None)
            if state == "off":
                self.draw_reply()

        pause.changed.connect(on_pause)

    def draw_reply(self) -> None:
        """The whole reply again (a new one, or a finished one opened): its trace folded if answered."""
        reply = self.reply
        self.thinking_pane.clear()
        self.answer_pane.clear()
        self.tool_panel.clear()
        self.thinking_pane.append(reply.trace)
        self.thinking_pane.marks.show(reply.edits)
        if reply.rounds:  # a finished reply's calls: without buttons (a call left waiting can't run now)
            self.tool_panel.show_rounds(reply.rounds)
        self.thinking_pane.set_tokens(reply.thinking_tokens)
        self.answer_pane.append(reply.answer)
        if reply.state in ("idle", "finished"):
            self.answer_pane.finish()  # whole: a formula left open is text, not one still streaming
        else:
            self.answer_pane.render_markdown()
        self.set_backend(reply.backend)
        self.thinking_pane.set_folded(bool(reply.answer))

    def show_conversation(self, conversation: Conversation) -> None:
        """The thread down to the last question (the panes show the reply model)."""
        self.render_thread(conversation)

    def render_thread(self, conversation: Conversation) -> None:
        """Earlier turns in full (their newest page: ``ThreadPages``), then the question the panes below answer.

        A new question in the conversation shown appends the previous reply and the question: rendering
        the whole thread again cost 85 ms for 30 turns of 500-word answers, and grew with the thread.
        """
        self.pages.render(conversation)
        self.transcript.setVisible(bool(conversation.turns))  # no empty box above a new conversation
        bar = self.transcript.verticalScrollBar()
        bar.setValue(bar.maximum())
        # The thread takes what it needs, up to 40% of the height; the live reply keeps the rest.
        total = sum(self.thread_split.sizes()) or self.thread_split.height()
        needed = int(self.transcript.document().size().height()) + 2 * self.transcript.frameWidth() + 4
        top = max(40, min(needed, int(total * 0.4)))
        self.thread_split.setSizes([top, total - top])

    def scroll_to_turn(self, index: int) -> None:
        """The thread scrolled to the question of the shown turn at ``index`` (a search result's), drawn first if
        it is not on the pages drawn."""
        self.pages.reveal(index)
        self.transcript.scrollToAnchor(f"turn-{index}")

    def _redraw_thread(self, _key: str) -> None:
        """A formula in the thread was drawn: the thread again, once for the formulas drawn meanwhile (one render
        per formula made a long maths thread quadratic)."""
        if not self._thread_redraw.isActive():
            self._thread_redraw.start()

    def redraw_thread(self) -> None:
        """The thread drawn again, as it is (its formulas drawn, its token counts counted meanwhile)."""
        if self.pages.conversation is not None:
            self.render_thread(self.pages.conversation)

    def set_backend(self, backend: str) -> None:
        self.answer_pane.header.setText(f"Answer · via {backend}" if backend else "Answer")

    def start_reply(self, conversation: Conversation) -> None:
        self.render_thread(conversation)

    def show_tool_round(self, tool_round: ToolRound) -> None:
        """The reply called tools: their cards, below the thinking that led to them."""
        self.thinking_pane.set_folded(False)
        self.tool_panel.add_round(tool_round)
        total = sum(self.live_split.sizes()) or self.live_split.height()
        self.live_split.setSizes([total * 2 // 5, total * 2 // 5, total // 5])

    def continue_reply(self) -> None:
        """The results went back: the further thinking follows a marker; the answer starts afresh."""
        self.thinking_pane.append(AFTER_TOOLS)
        self.answer_pane.clear()

    def start_answer(self) -> None:
        self.thinking_pane.end()
        if self.thinking_pane.text():
            self.thinking_pane.set_folded(True)  # the answer takes the room; the trace is one click away

    def finish_reply(self) -> None:
        self.thinking_pane.end()
        self.answer_pane.finish()

    def _on_state(self, state: ReplyState) -> None:
        if state == "finished":
            self.finish_reply()

    def show_loop(self, note: LoopNote) -> None:
        """The guard's note; a cut thinking loop collapses in the trace, a cut answer loses its copies."""
        earlier = len(self.reply.trace) - len(self.reply.thinking)  # the reply's earlier requests' thinking
        collapse = earlier + note.start_char if note.cut and note.phase == "thinking" else None
        self.thinking_pane.show_loop(note.summary, collapse, note.copies)
        if note.cut and note.phase == "answer":
            self.answer_pane.keep(note.kept_char)

    def on_thinking_folded(self, folded: bool) -> None:
        """Folded, the trace is its one-line header above the answer; unfolded, it shares the height."""
        pane = self.thinking_pane
        pane.setMaximumHeight(pane.sizeHint().height() if folded else QWIDGETSIZE_MAX)
        total = sum(self.live_split.sizes()) or self.live_split.height()
        header = pane.sizeHint().height() if folded else total // 2
        cards = (total - header) // 2 if self.tool_panel.isVisible() else 0  # the calls share the rest
        self.live_split.setSizes([header, cards, total - header - cards])
