"""The sources of the answer shown: the passages its question was asked with, listed under the answer, and the
one viewer of a citation's source at a time.

A citation ([n] in the answer, or a source in the list; in the thread, an earlier answer's [n] and its sources,
through ``WindowKnowledge.cite``) opens ``SourceViewer`` (viewer.py): the file itself, read-only and plain, at the
passage's lines or page with them highlighted, or the passage as the model read it with the reason the file isn't
shown (outside the collection's folders, gone, changed since it was indexed).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.core.chat.answer_markup import CITE_SCHEME
from app.core.chat.conversation import Source, TurnKnowledge
from app.ui.chat.plain_text import escaped
from app.ui.knowledge.viewer import SourceViewer

SNIPPET_CHARS = 90


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
        self.viewer: SourceViewer | None = None
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
        lines = [f'<a href="{CITE_SCHEME}:{n}" style="text-decoration: none">{escaped(source_line(n, source))}</a>'
                 for n, source in enumerate(knowledge.sources, 1)]
        budget = f" of {knowledge.budget:,} left for them in the context" if knowledge.budget else ""
        self.label.setText(f"<small><b>Sources</b> · {escaped(knowledge.summary)}{budget}<br>"
                           f"{'<br>'.join(lines)}</small>")
        self.show()

    def citations(self) -> int:
        """How many sources the shown answer may cite ([1] … [n] become links)."""
        return len(self.knowledge.sources) if self.knowledge is not None else 0

    def open_source(self, number: int) -> SourceViewer | None:
        """Source ``number`` (from 1) of the shown answer in the viewer; None when it has no such source."""
        if self.knowledge is None or not 1 <= number <= len(self.knowledge.sources):
            return None
        return self.show_source(number, self.knowledge.sources[number - 1])

    def show_source(self, number: int, source: Source) -> SourceViewer:
        """``source`` (cited as [number]) in the viewer, in place of the one open."""
        if self.viewer is not None:
            self.viewer.close()
        viewer = self.viewer = SourceViewer(number, source, self.folders, parent=self.window())
        viewer.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        viewer.finished.connect(lambda _result: setattr(self, "viewer", None) if self.viewer is viewer else None)
        viewer.open()
        return viewer

    def _on_link(self, href: str) -> None:
        scheme, _, number = href.partition(":")
        if scheme == CITE_SCHEME and number.isdigit():
            self.open_source(int(number))
