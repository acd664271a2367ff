"""The conversation list: the view with its buttons, over ConversationListModel."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QListView, QPushButton, QVBoxLayout, QWidget

from app.ui.controllers.conversation_model import ConversationListModel


class ConversationList(QWidget):
    """New, rename, delete; a view of the session's conversations whose current row is the one shown."""

    def __init__(self, model: ConversationListModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = QListView()
        self.list.setObjectName("ConversationList")
        self.list.setUniformItemSizes(True)  # one row measured, not 10,000 (0.7 s before the window showed)
        self.list.setModel(model)
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

    def count(self) -> int:
        return self.list.model().rowCount()

    def title(self, row: int) -> str:
        return str(self.list.model().index(row, 0).data())

    def select(self, row: int) -> None:
        self.list.setCurrentIndex(self.list.model().index(row, 0))
