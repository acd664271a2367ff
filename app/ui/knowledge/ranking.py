"""Knowledge…'s ranking line: "Ranking: hybrid, BM25 + all-MiniLM-L6-v2 (installed package)", or BM25 and why
(none found, turned off, a broken folder named with its cause), and Embedding model… to choose one.

The choice is kept in the index (``KnowledgeStore.set_embedder_setting``), so `nalar knowledge` and the window use
the same model. Finding one reads a few small files: no model is loaded here (the sync's worker loads it).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QMenu, QPushButton, QWidget

from app.core.knowledge.db import KnowledgeUnavailable
from app.core.knowledge.embedder import OFF, EmbedderChoice, find_embedder, folder_problem
from app.core.knowledge.store import KnowledgeStore
from app.ui.chat.plain_text import plain_label


class RankingRow(QWidget):
    """The ranking line and its Embedding model… button (a folder, found automatically, or off)."""

    def __init__(self, store_path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store_path = store_path
        self.label = plain_label(word_wrap=True)
        self.label.setObjectName("KnowledgeRanking")
        self.button = QPushButton("Embedding model…")
        self.button.setToolTip("The sentence-transformers model that makes ranking hybrid (BM25 + vectors)")
        menu = QMenu(self.button)
        menu.addAction("Choose a model folder…", lambda: self.choose())
        menu.addAction("Find one automatically", lambda: self.store(""))
        menu.addAction("Off: BM25 only", lambda: self.store(OFF))
        self.button.setMenu(menu)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)
        self.choice = self.refresh()

    def refresh(self) -> EmbedderChoice:
        """The model the next sync and question use, shown."""
        try:
            store = KnowledgeStore(self.store_path)
        except KnowledgeUnavailable:
            setting = ""
        else:
            try:
                setting = store.embedder_setting()
            finally:
                store.close()
        self.choice = find_embedder(setting)
        self.label.setText(self.choice.describe())
        return self.choice

    def choose(self, folder: Path | None = None) -> None:
        """A model folder, checked before it is kept: a broken one is named with its cause and not kept."""
        if folder is None:
            chosen = QFileDialog.getExistingDirectory(self, "Choose a sentence-transformers model folder",
                                                      str(Path.home()))
            if not chosen:
                return
            folder = Path(chosen)
        if problem := folder_problem(folder.resolve()):
            self.refresh()
            self.label.setText(f"{self.choice.describe()}\nNot chosen: {problem}.")
            return
        self.store(str(folder.resolve()))

    def store(self, setting: str) -> None:
        store = KnowledgeStore(self.store_path)
        try:
            store.set_embedder_setting(setting)
        finally:
            store.close()
        self.refresh()
