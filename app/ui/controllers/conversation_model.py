"""The conversations as a Qt list model: the one list the session changes and the views show."""

from __future__ import annotations

from collections.abc import Iterator

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from app.core.chat.conversation import Conversation

Index = QModelIndex | QPersistentModelIndex


class ConversationListModel(QAbstractListModel):
    """Owns the list of conversations; every change goes through a method that tells the views which rows
    changed (inserted, removed, retitled), never a reset: a view keeps its place in 10,000 rows."""

    def __init__(self, parent: object = None) -> None:
        super().__init__(parent)  # type: ignore[arg-type]
        self._conversations: list[Conversation] = []

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's own default
        return 0 if parent.isValid() else len(self._conversations)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._conversations):
            return None
        conversation = self._conversations[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            return conversation.title
        if role == Qt.ItemDataRole.UserRole:
            return conversation
        return None

    def __len__(self) -> int:
        return len(self._conversations)

    def __iter__(self) -> Iterator[Conversation]:
        return iter(list(self._conversations))

    def __getitem__(self, row: int) -> Conversation:
        return self._conversations[row]

    def append(self, conversation: Conversation) -> int:
        row = len(self._conversations)
        self.beginInsertRows(QModelIndex(), row, row)
        self._conversations.append(conversation)
        self.endInsertRows()
        return row

    def extend(self, conversations: list[Conversation]) -> None:
        """Many rows in one insertion (the history at start-up): one signal, not one per row."""
        if conversations:
            row = len(self._conversations)
            self.beginInsertRows(QModelIndex(), row, row + len(conversations) - 1)
            self._conversations.extend(conversations)
            self.endInsertRows()

    def replace(self, row: int, conversation: Conversation) -> None:
        """The row's conversation read in full (its turns); the list shows the same title."""
        self._conversations[row] = conversation
        changed = self.index(row)
        self.dataChanged.emit(changed, changed, [Qt.ItemDataRole.UserRole])

    def remove(self, row: int) -> Conversation:
        self.beginRemoveRows(QModelIndex(), row, row)
        conversation = self._conversations.pop(row)
        self.endRemoveRows()
        return conversation

    def set_title(self, row: int, title: str) -> None:
        self._conversations[row].title = title
        changed = self.index(row)
        self.dataChanged.emit(changed, changed, [Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole])
