"""ChatView: the conversation shown: earlier turns as a transcript, the live turn's thinking and answer panes."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QTextBrowser, QVBoxLayout, QWidget

from app.core.conversation import Conversation
from app.ui.panes import AnswerPane, ThinkingPane


class ChatView(QWidget):
    """Shows a conversation and the reply streaming into its last turn; it keeps no state of its own."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.transcript = QTextBrowser()
        self.transcript.setObjectName("Transcript")
        self.transcript.setOpenExternalLinks(True)
        self.thinking_pane = ThinkingPane()
        self.answer_pane = AnswerPane()
        self.live_split = QSplitter(Qt.Orientation.Horizontal)
        self.live_split.addWidget(self.thinking_pane)
        self.live_split.addWidget(self.answer_pane)
        self.live_split.setSizes([1, 1])
        vertical = QSplitter(Qt.Orientation.Vertical)
        vertical.addWidget(self.transcript)
        vertical.addWidget(self.live_split)
        vertical.setSizes([300, 500])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(vertical)
        self.thinking_pane.fold_changed.connect(self.on_thinking_folded)

    def show_conversation(self, conversation: Conversation) -> None:
        """Earlier turns in the transcript; the last one in the panes, its trace folded if it was answered."""
        self.render_transcript(conversation, include_last=False)
        self.thinking_pane.clear()
        self.answer_pane.clear()
        if conversation.turns:
            last = conversation.turns[-1]
            self.thinking_pane.append(last.thinking)
            self.thinking_pane.set_tokens(last.thinking_tokens)
            self.answer_pane.append(last.answer)
            self.answer_pane.render_markdown()
            self.set_backend(last.backend)
            self.thinking_pane.set_folded(bool(last.answer))

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

    def set_backend(self, backend: str) -> None:
        self.answer_pane.header.setText(f"Answer · via {backend}" if backend else "Answer")

    def start_reply(self, conversation: Conversation) -> None:
        self.render_transcript(conversation, include_last=False)
        self.thinking_pane.clear()
        self.answer_pane.clear()

    def start_answer(self) -> None:
        self.thinking_pane.end()
        if self.thinking_pane.text():
            self.thinking_pane.set_folded(True)  # the answer takes the room; the trace is one click away

    def finish_reply(self) -> None:
        self.thinking_pane.end()
        self.answer_pane.render_markdown()

    def on_thinking_folded(self, folded: bool) -> None:
        """A folded trace shrinks to its header so the answer gets the room."""
        total = sum(self.live_split.sizes()) or self.live_split.width()
        folded_width = 180
        self.live_split.setSizes([folded_width, total - folded_width] if folded else [total // 2, total - total // 2])
