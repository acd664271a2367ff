"""Help → Keyboard shortcuts: every action of the window's table, its menu and its keys, read-only."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractItemView, QDialog, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget


class ShortcutsDialog(QDialog):
    """``rows`` are (menu, action, shortcut); an action without a shortcut shows an empty cell."""

    def __init__(self, rows: list[tuple[str, str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.resize(460, 520)
        self.table = QTableWidget(len(rows), 3)
        self.table.setHorizontalHeaderLabels(["Menu", "Action", "Shortcut"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                self.table.setItem(r, c, QTableWidgetItem(value))  # an item's text is plain, never markup
        self.table.resizeColumnsToContents()
        QVBoxLayout(self).addWidget(self.table)
