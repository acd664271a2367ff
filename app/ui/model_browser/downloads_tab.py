"""Downloads: the queue, one row per item (bytes, speed, time left, the file it is on), Pause, Resume, Cancel, and
Use once an item is done. Items arrive from ``DownloadsFeed`` on the GUI thread."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.core.hub.queue import QueueItem
from app.ui.chat.plain_text import plain_label
from app.ui.model_browser.models_hub import ModelsHub
from app.ui.model_browser.text_list import TextListView, TextRow
from app.ui.model_browser.texts import queue_line


class DownloadsTab(QWidget):
    """``use_requested(item)``: Use on a finished download (QueueItem)."""

    use_requested = Signal(object)

    def __init__(self, hub: ModelsHub, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.hub = hub
        self.items: dict[str, QueueItem] = {}
        self.count_label = plain_label(word_wrap=True)
        self.problem_label = plain_label(word_wrap=True)  # quotes the queue's refusals (disk, gated, offline)
        self.problem_label.setStyleSheet("color: #b00020;")
        self.problem_label.hide()
        self.list = TextListView()
        self.list.selectionModel().currentChanged.connect(lambda *_: self._enable())
        buttons = QHBoxLayout()
        self.pause_button = QPushButton("Pause")
        self.resume_button = QPushButton("Resume")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop it and delete its partial files")
        self.use_button = QPushButton("Use")
        self.forget_button = QPushButton("Remove from list")
        self.forget_button.setToolTip("A finished, cancelled or failed download leaves the list (its files stay)")
        self.forget_button.clicked.connect(self.forget_selected)
        for button, act in ((self.pause_button, lambda i: hub.queue.pause(i)),
                            (self.resume_button, lambda i: hub.queue.resume(i)),
                            (self.cancel_button, lambda i: hub.queue.cancel(i))):
            button.clicked.connect(lambda _=False, act=act: self._act(act))
            buttons.addWidget(button)
        buttons.addWidget(self.forget_button)
        buttons.addStretch(1)
        buttons.addWidget(self.use_button)
        self.use_button.clicked.connect(self._use)
        layout = QVBoxLayout(self)
        layout.addWidget(self.count_label)
        layout.addWidget(self.problem_label)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        hub.feed.item_changed.connect(self.update_item)
        if hub.queue_open:
            for item in hub.queue.items():
                self.items[item.item_id] = item
        self.refresh()

    def update_item(self, item: QueueItem) -> None:
        self.items[item.item_id] = item
        self.refresh()

    def refresh(self) -> None:
        self.list.rows.show([TextRow(item.item_id, queue_line(item)) for item in self.items.values()])
        running = sum(1 for item in self.items.values() if item.state in ("queued", "running"))
        self.count_label.setText(f"{len(self.items)} download(s), {running} under way or waiting. They go on "
                                 "while this dialog is closed, and resume after a restart of Nalar.")
        self._enable()

    def show_problem(self, text: str) -> None:
        """A refused download (free disk, gated repo, offline hub), as the queue words it; "" hides it."""
        self.problem_label.setText(text)
        self.problem_label.setVisible(bool(text))

    def selected(self) -> QueueItem | None:
        key = self.list.current_key()
        return self.items.get(key) if key else None

    def _enable(self) -> None:
        item = self.selected()
        state = item.state if item else None
        self.pause_button.setEnabled(state in ("queued", "running"))
        self.resume_button.setEnabled(state in ("paused", "failed"))
        self.cancel_button.setEnabled(state in ("queued", "running", "paused", "failed"))
        self.use_button.setEnabled(state == "done")
        self.forget_button.setEnabled(state in ("done", "cancelled", "failed"))

    def forget_selected(self) -> None:
        item = self.selected()
        if item is not None and item.state in ("done", "cancelled", "failed"):
            self.hub.queue.forget(item.item_id)
            del self.items[item.item_id]
            self.list.rows.show([])  # a row left the middle: the list is shown again from the top
            self.refresh()

    def _act(self, act: object) -> None:
        item = self.selected()
        if item is not None and callable(act):
            act(item.item_id)

    def _use(self) -> None:
        item = self.selected()
        if item is not None and item.state == "done":
            self.use_requested.emit(item)
