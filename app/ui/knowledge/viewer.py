"""A citation's viewer: the cited file itself, read-only and as plain text, scrolled to the passage's lines with them
highlighted (a PDF: the cited page's text, "page 3 of 5"), or, where the file can't be shown or no longer holds the
passage there, the passage as the model read it with the reason.

The file is read off the GUI thread (the one runner) by ``excerpt.read_excerpt``, bounded: the index's own reader
for a file it could read, a window around the passage for a larger one. It opens only a regular file inside one of
the collection's folders as they are now (``file_refusal``): a source from an imported or damaged history that names
another path is shown but never read or opened. "Open file" hands the file itself to the desktop (a file:// URL, no
fragment: most viewers can't be told a line); "Copy path:line" gives the place to an editor.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QColor, QDesktopServices, QFontDatabase, QGuiApplication, QTextCursor, QTextFormat
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QMessageBox,
    QPlainTextEdit,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.conversation import Source
from app.core.knowledge.excerpt import Excerpt, read_excerpt
from app.core.knowledge.reader import Unreadable
from app.ui.chat.plain_text import plain_label
from app.ui.controllers.operations import Operation, run_blocking

CHANGED = "The file changed since it was indexed: the passage is no longer at {place}. The passage as it was read " \
          "is shown below."
MARK = QColor("#fff1a8")


def file_refusal(source: Source, folders: tuple[Path, ...]) -> str | None:
    """Why the source's file must not be read or opened, or None: only a regular file inside one of the
    collection's folders (both resolved, so a symlink out of them or a ``..`` is refused)."""
    if not folders:
        return f"The collection {source.collection!r} is gone (removed in Knowledge…), so its files aren't opened."
    try:
        path = Path(source.path).resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # gone, unreadable, or a symlink loop
        return f"The file can't be found now ({type(exc).__name__}): {source.path}"
    if not any(path.is_relative_to(folder.resolve()) for folder in folders):
        return f"This file is outside the folders of {source.collection!r}, so it is not opened: {path}"
    if not path.is_file():
        return f"This is not a regular file, so it is not opened: {path}"
    return None


def place_text(source: Source) -> str:
    """What "Copy path:line" copies: ``/notes/a.md:40`` (an editor's form), ``/papers/b.pdf#page=3``."""
    if source.page is not None:
        return f"{source.path}#page={source.page}"
    return f"{source.path}:{source.line_start}" if source.line_start is not None else source.path


class SourceViewer(QDialog):
    """Source ``number``: where it is, the file at that place (``file_view``) or why not (``note``), the passage
    as read (``passage``, shown when the file doesn't show it), Open file and Copy path:line. ``excerpt`` is what
    was read; ``settled`` once the view is final."""

    def __init__(self, number: int, source: Source, folders: Callable[[str], tuple[Path, ...]],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source, self._folders = source, folders
        self.excerpt: Excerpt | None = None
        self.settled = False
        self.setObjectName("SourceViewer")
        self.setWindowTitle(f"[{number}] {Path(source.path).name}")
        self.resize(760, 560)
        self.where = plain_label(f"[{number}] {source.path}" + (f" · {source.place}" if source.place else "")
                                 + f" · collection {source.collection}", word_wrap=True)
        self.where.setObjectName("PassageWhere")
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = plain_label("", word_wrap=True)  # "showing lines …", "page 3 of 5", or why the file isn't shown
        self.note.setObjectName("SourceNote")
        self.file_view = QPlainTextEdit()  # the file's words: plain text, whatever they hold
        self.file_view.setObjectName("SourceFile")
        self.file_view.setReadOnly(True)
        self.file_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.file_view.hide()
        self.passage = QPlainTextEdit(source.text)
        self.passage.setObjectName("PassageText")
        self.passage.setReadOnly(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.open_button = buttons.addButton("Open file", QDialogButtonBox.ButtonRole.ActionRole)
        self.open_button.setObjectName("OpenSourceFile")
        self.open_button.setToolTip("Open the file in the desktop's viewer for it (it opens at its start: go to the "
                                    "page or lines above)")
        self.open_button.clicked.connect(self.open_file)
        self.copy_button = buttons.addButton("Copy path:line", QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.setObjectName("CopySourcePlace")
        self.copy_button.setToolTip(f"Copy {place_text(source)} (editors open a path:line at that line)")
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(place_text(source)))
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.where)
        layout.addWidget(self.note)
        layout.addWidget(self.file_view, 3)
        layout.addWidget(self.passage, 1)
        layout.addWidget(buttons)
        self.reading: Operation[Excerpt] | None = None
        if (refusal := file_refusal(source, folders(source.collection))) is not None:
            self._settle(refusal)
        else:
            self.note.setText("Reading the file…")
            path = Path(source.path).resolve()
            self.reading = run_blocking(f"Reading {path.name}", lambda: read_excerpt(path, source), parent=self)
            self.reading.success(self._show).failure(self._failed)

    def _settle(self, why: str) -> None:
        """The file isn't shown (or not with the passage): ``why``, above the passage as it was read."""
        self.note.setText(why)
        self.passage.show()
        self.settled = True

    def _failed(self, exc: Exception) -> None:
        reason = exc.reason if isinstance(exc, Unreadable) else f"{type(exc).__name__}: {exc}"
        self.file_view.hide()
        self._settle(f"The file can't be shown ({reason}). The passage as it was read is shown below.")

    def _show(self, excerpt: Excerpt) -> None:
        """The file's text, scrolled to the passage's lines and those highlighted and selected."""
        self.excerpt = excerpt
        self.file_view.setPlainText(excerpt.text)
        self.file_view.show()
        if excerpt.marked is None:
            self._settle(f"{excerpt.where}. " + CHANGED.format(place=self.source.place or "its place"))
            return
        document = self.file_view.document()
        first, last = (document.findBlockByNumber(n) for n in excerpt.marked)
        cursor = QTextCursor(document)
        cursor.setPosition(last.position() + last.length() - 1)
        cursor.setPosition(first.position(), QTextCursor.MoveMode.KeepAnchor)  # the cursor at the first line
        mark = QTextEdit.ExtraSelection()
        mark.cursor = cursor  # type: ignore[misc]  # PySide6's stubs miss the attribute's setter
        mark.format.setBackground(MARK)  # type: ignore[attr-defined]
        mark.format.setProperty(QTextFormat.Property.FullWidthSelection, True)  # type: ignore[attr-defined]
        self.file_view.setExtraSelections([mark])
        self.file_view.setTextCursor(cursor)
        self.file_view.centerCursor()
        self.passage.hide()  # the file shows it, in its place
        self.note.setText(excerpt.where)
        self.settled = True

    def open_file(self) -> bool:
        """The file in the desktop's viewer, if it is one the collection may open; else why not, as plain text."""
        if (refusal := file_refusal(self.source, self._folders(self.source.collection))) is not None:
            box = QMessageBox(QMessageBox.Icon.Warning, "File not opened", refusal, parent=self)
            box.setTextFormat(Qt.TextFormat.PlainText)
            box.open()
            return False
        return QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(self.source.path).resolve())))
