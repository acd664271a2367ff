"""The sources of the answer shown: the passages its question was asked with, listed under the answer, and a
citation's viewer.

A citation ([n] in the answer, or a source in the list) opens a small viewer with the passage as the model read
it (plain text, never markup), its file's path and its page or lines, and "Open file". Most desktop viewers can't
be told a line, and a PDF viewer a page only in its own way, so the viewer shows the place and the passage, and
"Open file" hands the file itself (a file:// URL, no fragment) to the desktop. It opens only a regular file inside
one of the collection's folders as they are now: a source from an imported or damaged history that names another
path is shown but never opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.conversation import Source, TurnKnowledge
from app.ui.chat.plain_text import escaped, plain_label

SOURCE_SCHEME = "nalar-source"  # nalar-source:N, the shown turn's Nth source (our own link, never model text)
SNIPPET_CHARS = 90


def file_refusal(source: Source, folders: tuple[Path, ...]) -> str | None:
    """Why the source's file must not be opened, or None: only a regular file inside one of the collection's
    folders (both resolved, so a symlink out of them or a ``..`` is refused)."""
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


class PassageDialog(QDialog):
    """One source: where it is (path, page or lines), the passage as the model read it, and Open file."""

    def __init__(self, number: int, source: Source, folders: Callable[[str], tuple[Path, ...]],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source, self._folders = source, folders
        self.setObjectName("PassageDialog")
        self.setWindowTitle(f"[{number}] {Path(source.path).name}")
        self.resize(640, 420)
        self.where = plain_label(f"[{number}] {source.path}" + (f" · {source.place}" if source.place else "")
                                 + f" · collection {source.collection}", word_wrap=True)
        self.where.setObjectName("PassageWhere")
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text = QPlainTextEdit(source.text)  # the file's words: plain text, whatever they hold
        self.text.setObjectName("PassageText")
        self.text.setReadOnly(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.open_button = buttons.addButton("Open file", QDialogButtonBox.ButtonRole.ActionRole)
        self.open_button.setObjectName("OpenSourceFile")
        self.open_button.setToolTip("Open the file in the desktop's viewer for it (go to the page or lines above)")
        self.open_button.clicked.connect(self.open_file)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.where)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)

    def open_file(self) -> bool:
        """The file in the desktop's viewer, if it is one the collection may open; else why not, as plain text."""
        if (refusal := file_refusal(self.source, self._folders(self.source.collection))) is not None:
            box = QMessageBox(QMessageBox.Icon.Warning, "File not opened", refusal, parent=self)
            box.setTextFormat(Qt.TextFormat.PlainText)
            box.open()
            return False
        return QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(self.source.path).resolve())))


def source_line(number: int, source: Source) -> str:
    """"[2] notes.md · lines 3–9 · “first words of it…”", plain text."""
    words = " ".join(source.text.split())
    snippet = words[:SNIPPET_CHARS] + ("…" if len(words) > SNIPPET_CHARS else "")
    place = f" · {source.place}" if source.place else ""
    return f"[{number}] {Path(source.path).name}{place} · “{snippet}”"


class SourcesPanel(QWidget):
    """Under the answer: "Sources · 6 passages, 1,840 tokens (BM25)" and one link per source; hidden when the
    shown question was asked without knowledge."""

    def __init__(self, folders: Callable[[str], tuple[Path, ...]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("SourcesPanel")
        self.folders = folders
        self.knowledge: TurnKnowledge | None = None
        self.viewer: PassageDialog | None = None
        self.label = QLabel()
        self.label.setObjectName("SourcesList")
        self.label.setTextFormat(Qt.TextFormat.RichText)  # our markup; every file's word in it is escaped
        self.label.setWordWrap(True)
        self.label.linkActivated.connect(self._on_link)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 0, 6, 0)
        layout.addWidget(self.label)
        self.hide()

    def show_sources(self, knowledge: TurnKnowledge | None, note: str = "") -> None:
        """The turn's sources; with none, ``note`` alone (why the question went without), or nothing."""
        self.knowledge = knowledge
        if knowledge is None or not knowledge.sources:
            self.label.setText(f"<small>{escaped(note)}</small>" if note else "")
            self.setVisible(bool(note))
            return
        lines = [f'<a href="{SOURCE_SCHEME}:{n}" style="text-decoration: none">{escaped(source_line(n, source))}</a>'
                 for n, source in enumerate(knowledge.sources, 1)]
        budget = f" of {knowledge.budget:,} left for them in the context" if knowledge.budget else ""
        self.label.setText(f"<small><b>Sources</b> · {escaped(knowledge.summary)}{budget}<br>"
                           f"{'<br>'.join(lines)}</small>")
        self.show()

    def citations(self) -> int:
        """How many sources the shown answer may cite ([1] … [n] become links)."""
        return len(self.knowledge.sources) if self.knowledge is not None else 0

    def open_source(self, number: int) -> PassageDialog | None:
        """Source ``number`` (from 1) in the viewer; None when the shown answer has no such source."""
        if self.knowledge is None or not 1 <= number <= len(self.knowledge.sources):
            return None
        if self.viewer is not None:
            self.viewer.close()
        viewer = self.viewer = PassageDialog(number, self.knowledge.sources[number - 1], self.folders,
                                             parent=self.window())
        viewer.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        viewer.finished.connect(lambda _result: setattr(self, "viewer", None) if self.viewer is viewer else None)
        viewer.open()
        return viewer

    def _on_link(self, href: str) -> None:
        scheme, _, number = href.partition(":")
        if scheme == SOURCE_SCHEME and number.isdigit():
            self.open_source(int(number))
