"""A list of plain-text rows, each with a key, over which the browser's three lists are views.

``show`` updates the view in place where it can: rows that kept their place are changed, new ones appended, so a
result list that grows while results stream in keeps its selection and scroll position, and Qt lays out only
what changed. The text is shown by Qt's item views as plain text (DisplayRole never renders markup).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtWidgets import QAbstractItemView, QListView, QWidget

KEY_ROLE = Qt.ItemDataRole.UserRole
AnyIndex = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class TextRow:
    key: str
    text: str
    enabled: bool = True


class TextListModel(QAbstractListModel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[TextRow] = []

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row = self.rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return row.text
        if role == KEY_ROLE:
            return row.key
        return None

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        if not index.isValid() or index.row() >= len(self.rows):
            return Qt.ItemFlag.NoItemFlags
        enabled = Qt.ItemFlag.ItemIsEnabled if self.rows[index.row()].enabled else Qt.ItemFlag.NoItemFlags
        return enabled | Qt.ItemFlag.ItemIsSelectable

    def show(self, rows: list[TextRow]) -> None:
        old = self.rows
        if [r.key for r in old] != [r.key for r in rows[: len(old)]]:
            self.beginResetModel()
            self.rows = list(rows)
            self.endResetModel()
            return
        changed = [i for i, (before, after) in enumerate(zip(old, rows)) if before != after]
        for i in changed:
            self.rows[i] = rows[i]
        if changed:  # one signal for the batch: the view lays its rows out once, not once per row
            self.dataChanged.emit(self.index(changed[0]), self.index(changed[-1]))
        if len(rows) > len(old):
            self.beginInsertRows(QModelIndex(), len(old), len(rows) - 1)
            self.rows = list(rows)
            self.endInsertRows()

    def keys(self) -> list[str]:
        return [row.key for row in self.rows]

    def text_of(self, key: str) -> str:
        return next(row.text for row in self.rows if row.key == key)


class TextListView(QListView):
    """A word-wrapped, single-selection list over a TextListModel; ``current_key`` is the selected row's key."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows = TextListModel(self)
        self.setModel(self.rows)
        self.setWordWrap(True)
        self.setSpacing(3)
        self.setAlternatingRowColors(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        # Word-wrapped rows are measured one by one: laid out 10 at a time between events, 50 results arriving
        # at once don't hold the window while all their heights are worked out.
        self.setLayoutMode(QListView.LayoutMode.Batched)
        self.setBatchSize(10)

    def current_key(self) -> str | None:
        index = self.currentIndex()
        return self.rows.data(index, KEY_ROLE) if index.isValid() else None  # type: ignore[return-value]

    def select_key(self, key: str) -> bool:
        keys = self.rows.keys()
        if key not in keys:
            return False
        self.setCurrentIndex(self.rows.index(keys.index(key)))
        return True
