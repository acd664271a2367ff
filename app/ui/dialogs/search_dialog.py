"""Search (Ctrl+K): the history's full-text search (titles, questions, answers, and thinking with a switch),
ranked, each result's snippet with its matched words in bold.

A snippet is model and user text: it is escaped first, and only then are the search's own marks
(``MARK_START``/``MARK_END``) turned into bold, so nothing the text holds is ever read as markup.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.history_search import MARK_END, MARK_START, SearchHit

SEARCH_DELAY_MS = 120  # typing pauses this long before the search runs: one query per pause, not per key


def snippet_html(hit: SearchHit) -> str:
    """The result as our own markup: its title and snippet escaped, the matched words bold."""
    snippet = html.escape(" ".join(hit.snippet.split()), quote=False)
    snippet = snippet.replace(MARK_START, "<b>").replace(MARK_END, "</b>")
    where = "title" if hit.message_id is None else "message"
    return (f'<span style="color: #57606a"><small>{html.escape(hit.title, quote=False)} · {where}</small></span>'
            f"<br>{snippet}")


class SearchDialog(QDialog):
    """``search(query, thinking)`` gives the hits; choosing one (Enter, a double click) emits ``chosen``."""

    chosen = Signal(object)  # the SearchHit

    def __init__(self, search: Callable[[str, bool], list[SearchHit]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Search conversations")
        self.resize(640, 480)
        self._search = search
        self.hits: list[SearchHit] = []
        self.query = QLineEdit()
        self.query.setPlaceholderText("Words in titles, questions and answers…")
        self.thinking = QCheckBox("Include thinking")
        self.results = QListWidget()
        self.results.setObjectName("SearchResults")
        self.status = QLabel()
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        top = QHBoxLayout()
        top.addWidget(self.query, 1)
        top.addWidget(self.thinking)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.results, 1)
        layout.addWidget(self.status)
        self._timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)
        self._timer.timeout.connect(self.run_search)
        self.query.textChanged.connect(lambda _text: self._timer.start())
        self.thinking.toggled.connect(lambda _on: self.run_search())
        self.query.returnPressed.connect(self.choose_current)
        self.results.itemActivated.connect(lambda _item: self.choose_current())

    def run_search(self) -> None:
        self._timer.stop()
        self.hits = self._search(self.query.text(), self.thinking.isChecked()) if self.query.text().strip() else []
        self.results.clear()
        for hit in self.hits:
            item = QListWidgetItem()
            label = QLabel(snippet_html(hit))
            label.setTextFormat(Qt.TextFormat.RichText)  # our markup, built from escaped text only
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
            label.setContentsMargins(4, 3, 4, 3)
            item.setSizeHint(label.sizeHint())
            self.results.addItem(item)
            self.results.setItemWidget(item, label)
        if self.hits:
            self.results.setCurrentRow(0)
        self.status.setText(f"{len(self.hits)} result(s)" if self.query.text().strip() else "")

    def choose_current(self) -> None:
        if self._timer.isActive():  # Enter before the pause ended: the query as typed
            self.run_search()
        row = self.results.currentRow()
        if 0 <= row < len(self.hits):
            self.chosen.emit(self.hits[row])
            self.accept()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Up and Down move through the results while the query keeps the focus."""
        if event.key() in (Qt.Key.Key_Up, Qt.Key.Key_Down) and self.hits:
            step = -1 if event.key() == Qt.Key.Key_Up else 1
            self.results.setCurrentRow(max(0, min(len(self.hits) - 1, self.results.currentRow() + step)))
            return
        super().keyPressEvent(event)
