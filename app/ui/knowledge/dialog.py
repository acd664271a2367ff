"""Knowledge…: the collections (folders of the user's own documents) with their files, passages, skipped files
and last sync; New collection, Add folder, Sync (a progress bar and Cancel), Remove; the chosen collection's
skipped files with the reason for each; the ranking used (BM25, or hybrid with the embedding model found) and
Embedding model… to choose one (ranking.RankingRow).

A sync runs through the one runner (``run_blocking``), never on the GUI thread: the worker reports progress to
``SyncProgressRelay``, which emits at most every PROGRESS_MS (a Qt signal, queued to the GUI thread); the dialog
reads the index again only once the sync has ended. Names, paths and reasons come from the user's files: shown as
plain text.
"""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.knowledge.db import KnowledgeUnavailable
from app.core.knowledge.embedder import Embedder
from app.core.knowledge.store import Collection, KnowledgeStore
from app.core.knowledge.sync import SyncProgress, SyncResult, sync_collection
from app.core.priority import lower_this_thread
from app.ui.chat.plain_text import plain_label
from app.ui.controllers.operations import Operation, run_blocking
from app.ui.knowledge.ranking import RankingRow

PROGRESS_MS = 100
COLUMNS = ("Collection", "Folders", "Files", "Passages", "Skipped", "Last sync")


class SyncProgressRelay(QObject):
    """Progress from the sync's worker thread to the GUI thread: at most one signal every PROGRESS_MS (a sync of
    thousands of small files would otherwise queue thousands of repaints), and always the latest at the end.

    The worker only stores the latest report and, if none is on its way, queues one wake-up; the GUI thread shows
    the latest and waits PROGRESS_MS before it shows another."""

    progressed = Signal(object)  # SyncProgress
    _arrived = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._latest: SyncProgress | None = None
        self._pending = False
        self._cooldown = QTimer(self, singleShot=True, interval=PROGRESS_MS)
        self._cooldown.timeout.connect(self._deliver)
        self._arrived.connect(self._on_arrived)  # a bound slot of this GUI-thread object: queued from the worker

    def report(self, progress: SyncProgress) -> None:
        """On the worker thread."""
        with self._lock:
            self._latest = progress
            if self._pending:
                return
            self._pending = True
        self._arrived.emit()

    def _on_arrived(self) -> None:
        if not self._cooldown.isActive():
            self._deliver()

    def _deliver(self) -> None:
        with self._lock:
            progress, self._latest, self._pending = self._latest, None, False
        if progress is not None:
            self.progressed.emit(progress)
            self._cooldown.start()


def _synced_in_background(store_path: Path, name: str, relay: SyncProgressRelay, cancel: threading.Event,
                          embedder: Embedder | None) -> SyncResult:
    """On the runner's worker thread, niced (and so the PDF readers it starts): on 2 cores the GUI thread gets the
    CPU first, and with it the GIL sooner when the worker lets go of it. The embedding model loads and runs here
    too, after the text index."""
    lower_this_thread()
    return sync_collection(store_path, name, on_progress=relay.report, cancelled=cancel.is_set, embedder=embedder)


def _show_progress(bar: QProgressBar, status: QLabel, progress: SyncProgress) -> None:
    """The bar and the status line for a progress report: files read, then passages embedded."""
    if progress.phase == "embedding":
        maximum, value, shown = progress.to_embed, progress.embedded, "embedding %v/%m passages"
        status.setText(f"Embedding {progress.to_embed:,} passages (hybrid ranking)…")
    else:
        maximum, value = progress.files_total, progress.files_done
        shown = f"%v of %m files · {progress.passages_added:,} passages"
        status.setText(f"Reading {progress.current}")
    bar.setRange(0, max(1, maximum))
    bar.setValue(value)
    bar.setFormat(shown)


def result_line(name: str, result: SyncResult) -> str:
    parts = [f"{result.read:,} read", f"{result.unchanged:,} unchanged", f"{result.removed:,} removed",
             f"{len(result.skipped):,} skipped"]
    if result.failed:
        parts.append(f"{len(result.failed):,} failed ({result.failed[0].path.name}: {result.failed[0].reason})")
    if result.embedded is not None:
        parts.append(f"{result.embedded.count:,} embedded")
    problem = f" {result.embedded.problem}" if result.embedded is not None and result.embedded.problem else ""
    return f"{name} synced: {', '.join(parts)}.{problem}"


class KnowledgeDialog(QDialog):
    """The collections of ``store_path``; one sync at a time (``sync_operation`` while it runs)."""

    synced = Signal(object)  # SyncResult, once a sync has ended and the table shows it

    def __init__(self, store_path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("KnowledgeDialog")
        self.setWindowTitle("Knowledge")
        self.resize(860, 520)
        self.store_path = store_path
        self.sync_operation: Operation[SyncResult] | None = None
        self._cancel = threading.Event()
        self.relay = SyncProgressRelay(self)
        self.relay.progressed.connect(self.show_progress)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("CollectionsTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.itemSelectionChanged.connect(self.show_skipped)
        self.new_button, self.add_button = QPushButton("New collection…"), QPushButton("Add folder…")
        self.sync_button, self.cancel_button = QPushButton("Sync"), QPushButton("Cancel")
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip("Forget the collection's index (your files are not touched)")
        self.progress = QProgressBar()
        self.status = plain_label(word_wrap=True)
        self.status.setObjectName("KnowledgeStatus")
        self.skipped = QListWidget()
        self.skipped.setObjectName("SkippedFiles")
        self.ranking = RankingRow(store_path)
        _lay_out(self)
        self.new_button.clicked.connect(lambda: self.new_collection())
        self.add_button.clicked.connect(lambda: self.add_folder())
        self.sync_button.clicked.connect(lambda: self.sync())
        self.cancel_button.clicked.connect(self.cancel)
        self.remove_button.clicked.connect(lambda: self.remove())
        self.finished.connect(lambda _result: self.cancel())  # closed mid-sync: the worker stops at its next file
        self.refresh()

    # ---- the collections --------------------------------------------------------------------------

    def _store(self) -> KnowledgeStore:
        return KnowledgeStore(self.store_path)

    def collections(self) -> list[Collection]:
        """The index's collections; none, with the problem and its fix shown, when the index can't be opened."""
        try:
            store = self._store()
        except KnowledgeUnavailable as exc:
            self.status.setText(f"{exc.problem} {exc.fix}")
            return []
        try:
            return store.collections()
        finally:
            store.close()

    @property
    def chosen(self) -> str | None:
        item = self.table.item(self.table.currentRow(), 0) if self.table.currentRow() >= 0 else None
        return item.text() if item is not None else None

    def refresh(self, choose: str | None = None) -> None:
        """The table from the index (never while a sync writes it), ``choose`` (or the chosen one) selected."""
        choose = choose or self.chosen
        collections = self.collections()
        self.table.setRowCount(len(collections))
        for row, collection in enumerate(collections):
            synced = collection.synced_at.strftime("%Y-%m-%d %H:%M") if collection.synced_at else "never"
            cells = (collection.name, "; ".join(str(folder) for folder in collection.folders),
                     f"{collection.files:,}", f"{collection.passages:,}", f"{collection.skipped:,}", synced)
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))  # items show plain text
            if collection.name == choose:
                self.table.selectRow(row)
        if self.table.currentRow() < 0 and collections:
            self.table.selectRow(0)
        self.table.resizeColumnsToContents()
        self._enable()
        self.show_skipped()

    def show_skipped(self) -> None:
        self.skipped.clear()
        if (name := self.chosen) is None or self.sync_operation is not None:
            return
        store = self._store()
        try:
            skipped = store.skipped(name)
        finally:
            store.close()
        self.skipped.addItems([f"{file.path} — {file.reason}" for file in skipped])

    def _enable(self) -> None:
        syncing, chosen = self.sync_operation is not None, self.chosen is not None
        for button in (self.new_button, self.add_button, self.remove_button):
            button.setEnabled(not syncing and (chosen or button is self.new_button))
        self.sync_button.setEnabled(not syncing and chosen)
        self.cancel_button.setEnabled(syncing)
        self.progress.setVisible(syncing)

    def new_collection(self, name: str | None = None, folder: Path | None = None) -> Operation[SyncResult] | None:
        """A named collection of one folder (asked for when not given), synced at once."""
        if name is None:
            name, ok = QInputDialog.getText(self, "New collection", "Name (for example notes, papers):")
            if not ok or not name.strip():
                return None
        folder = folder or self._ask_folder()
        if folder is None:
            return None
        return self._added(name.strip(), [folder])

    def add_folder(self, folder: Path | None = None) -> Operation[SyncResult] | None:
        """Another folder into the chosen collection, synced at once."""
        if (name := self.chosen) is None or (folder := folder or self._ask_folder()) is None:
            return None
        current = next((c.folders for c in self.collections() if c.name == name), ())
        return self._added(name, [*current, folder])

    def _ask_folder(self) -> Path | None:
        chosen = QFileDialog.getExistingDirectory(self, "Add a folder to the collection", str(Path.home()))
        return Path(chosen) if chosen else None

    def _added(self, name: str, folders: list[Path]) -> Operation[SyncResult] | None:
        try:
            store = self._store()
        except KnowledgeUnavailable as exc:
            self.status.setText(f"{name} was not added: {exc.problem} {exc.fix}")
            return None
        try:
            store.add(name, folders)
        except (ValueError, OSError) as exc:  # a bad name, a folder that isn't one: the core's words say which
            self.status.setText(f"{name} was not added: {exc}")
            return None
        finally:
            store.close()
        self.refresh(choose=name)
        return self.sync(name)

    def remove(self, name: str | None = None, *, ask: bool = True) -> bool:
        if (name := name or self.chosen) is None:
            return False
        if ask and QMessageBox.question(self, "Remove collection", f"Forget the index of {name}? Your files stay "
                                        "as they are.") != QMessageBox.StandardButton.Yes:
            return False
        store = self._store()
        try:
            store.remove(name)
        except KeyError:
            pass  # gone already (removed in a terminal meanwhile)
        finally:
            store.close()
        self.status.setText(f"{name} removed.")
        self.refresh()
        return True

    # ---- sync --------------------------------------------------------------------------------------

    def sync(self, name: str | None = None) -> Operation[SyncResult] | None:
        """The collection brought up to date on a worker thread (the one runner); Cancel stops it between files."""
        if (name := name or self.chosen) is None or self.sync_operation is not None:
            return None
        cancel = self._cancel = threading.Event()
        store_path, relay, embedder = self.store_path, self.relay, self.ranking.refresh().embedder
        self.progress.setRange(0, 0)  # busy until the first count arrives
        self.status.setText(f"Syncing {name}…")
        operation = self.sync_operation = run_blocking(
            f"Syncing the knowledge collection {name}",
            lambda: _synced_in_background(store_path, name, relay, cancel, embedder), parent=self)
        operation.success(lambda result: self._synced(name, result)).failure(lambda exc: self._failed(name, exc))
        self._enable()
        return operation

    def cancel(self) -> None:
        self._cancel.set()
        if self.sync_operation is not None:
            self.status.setText("Cancelling: the file being read is finished first…")

    def show_progress(self, progress: SyncProgress) -> None:
        if self.sync_operation is None:  # the relay's latest, come after the end: the result line stays
            return
        _show_progress(self.progress, self.status, progress)

    def _synced(self, name: str, result: SyncResult) -> None:
        self.sync_operation = None
        self.status.setText(("Cancelled: what was read is kept; Sync goes on from there. " if result.cancelled
                             else "") + result_line(name, result))
        self.refresh(choose=name)
        self.synced.emit(result)

    def _failed(self, name: str, exc: Exception) -> None:
        self.sync_operation = None
        self.status.setText(f"{name} could not be synced: {type(exc).__name__}: {exc}")
        self.refresh(choose=name)

    def reject(self) -> None:
        self.cancel()
        super().reject()


def _lay_out(dialog: KnowledgeDialog) -> None:
    buttons = QHBoxLayout()
    for button in (dialog.new_button, dialog.add_button, dialog.sync_button, dialog.cancel_button,
                   dialog.remove_button):
        buttons.addWidget(button)
    buttons.addStretch(1)
    layout = QVBoxLayout(dialog)
    layout.addWidget(dialog.table, 3)
    layout.addLayout(buttons)
    layout.addWidget(dialog.progress)
    layout.addWidget(dialog.status)
    layout.addWidget(dialog.ranking)
    layout.addWidget(plain_label("Skipped files of the chosen collection, with the reason:"))
    layout.addWidget(dialog.skipped, 2)
