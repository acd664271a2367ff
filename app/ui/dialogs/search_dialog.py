"""Search (Ctrl+K): the history's full-text search (titles, questions, answers, and thinking with a switch),
ranked, each result's snippet with its matched words in bold.

A snippet is model and user text: it is escaped first, and only then are the search's own marks
(``MARK_START``/``MARK_END``) turned into bold, so nothing the text holds is ever read as markup.

Searches run on the project's runner (``operations.run_blocking``), off the GUI thread: a new query interrupts
the one still running, whose result is dropped. A failure (a locked or damaged file) is a message, not an error.
"""

from __future__ import annotations

import html
import sqlite3
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

from app.core.chat.history_search import CAP_NOTE, MARK_END, MARK_START, HistorySearch, SearchHit, query_terms
from app.ui.controllers.operations import Operation, run_blocking

SEARCH_DELAY_MS = 120  # typing pauses this long before the search runs: one query per pause, not per key


def snippet_html(hit: SearchHit) -> str:
    """The result as our own markup: its title and snippet escaped, the matched words bold."""
    snippet = html.escape(" ".join(hit.snippet.split()), quote=False)
    snippet = snippet.replace(MARK_START, "<b>").replace(MARK_END, "</b>")
    where = "title" if hit.message_id is None else "message"
    return (f'<span style="color: #57606a"><small>{html.escape(hit.title, quote=False)} · {where}</small></span>'
            f"<br>{snippet}")


class SearchDialog(QDialog):
    """``search(query, thinking)`` makes one search, run off the GUI thread; choosing a hit (Enter, a double
    click) emits ``chosen``."""

    chosen = Signal(object)  # the SearchHit

    def __init__(self, search: Callable[[str, bool], HistorySearch], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Search conversations")
        self.resize(640, 480)
        self._search = search
        self._running: tuple[HistorySearch, Operation[list[SearchHit]]] | None = None
        self._choose_on_arrival = False
        self._note = ""  # said after the count: the query was capped
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
        self._stop_running()
        self._choose_on_arrival = False  # an Enter pressed for an older query
        terms = query_terms(self.query.text())
        self._note = f" · {CAP_NOTE}" if terms.cut else ""
        if not terms.words:
            self._show([], "")
            return
        search = self._search(" ".join(terms.words), self.thinking.isChecked())
        operation = run_blocking("Search", search.run, parent=self)
        self._running = (search, operation)
        operation.success(self._arrived).failure(self._failed)
        self.status.setText(f"Searching…{self._note}")

    def _stop_running(self) -> None:
        """A newer query (or closing) makes the running search stale: stopped inside SQLite, its result dropped."""
        if self._running is not None:
            search, operation = self._running
            operation.cancel()
            search.interrupt()
            self._running = None

    def _arrived(self, hits: list[SearchHit]) -> None:
        self._running = None
        self._show(hits, f"{len(hits)} result(s){self._note}")
        if self._choose_on_arrival:
            self.choose_current()

    def _failed(self, exc: Exception) -> None:
        """A locked or damaged file (sqlite3.Error), or anything else: said in the dialog (the runner logs it)."""
        self._running = None
        self._choose_on_arrival = False
        what = str(exc) if isinstance(exc, sqlite3.Error) else f"{type(exc).__name__}: {exc}"
        self._show([], f"The search failed ({what}). Try again; if it keeps failing, restart Nalar.")

    def _show(self, hits: list[SearchHit], status: str) -> None:
        self.hits = hits
        self.results.clear()
        for hit in hits:
            item = QListWidgetItem()
            label = QLabel(snippet_html(hit))
            label.setTextFormat(Qt.TextFormat.RichText)  # our markup, built from escaped text only
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
            label.setContentsMargins(4, 3, 4, 3)
            item.setSizeHint(label.sizeHint())
            self.results.addItem(item)
            self.results.setItemWidget(item, label)
        if hits:
            self.results.setCurrentRow(0)
        self.status.setText(status)

    def choose_current(self) -> None:
        if self._timer.isActive():  # Enter before the pause ended: the query as typed
            self.run_search()
        if self._running is not None:  # chosen once its results are in
            self._choose_on_arrival = True
            return
        self._choose_on_arrival = False
        row = self.results.currentRow()
        if 0 <= row < len(self.hits):
            self.chosen.emit(self.hits[row])
            self.accept()

    def done(self, result: int) -> None:
        self._stop_running()
        super().done(result)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Up and Down move through the results while the query keeps the focus."""
        if event.key() in (Qt.Key.Key_Up, Qt.Key.Key_Down) and self.hits:
            step = -1 if event.key() == Qt.Key.Key_Up else 1
            self.results.setCurrentRow(max(0, min(len(self.hits) - 1, self.results.currentRow() + step)))
            return
        super().keyPressEvent(event)
