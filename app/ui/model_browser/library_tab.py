"""Library: everything Nalar can load (its downloads, the Hugging Face cache, your folders), each with its size on
disk, its verdict, when it was last used and what is wrong with it; Use, Show folder, Delete (asks first, naming the
bytes freed) and Add folder…. Reading the library and working out verdicts run off the GUI thread."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QMessageBox, QPushButton, QVBoxLayout, QWidget

from app.core.hub.library import LibraryEntry
from app.core.hub.verdicts import FitVerdict, MachineBudget, folder_verdict
from app.core.models.hub_download import format_bytes
from app.ui.chat.plain_text import plain_label
from app.ui.controllers.operations import Operation, run_blocking
from app.ui.model_browser.models_hub import ModelsHub
from app.ui.model_browser.text_list import TextListView, TextRow
from app.ui.model_browser.texts import delete_question, library_line


def ask(parent: QWidget, title: str, text: str) -> bool:
    """A plain-text Yes/No question (it names paths from the disk)."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setDefaultButton(QMessageBox.StandardButton.No)
    return box.exec() == QMessageBox.StandardButton.Yes


def best_verdict(verdicts: list[FitVerdict]) -> FitVerdict | None:
    """The file set a library entry is judged by: the first that loads and fits, else the first that loads."""
    loadable = [v for v in verdicts if v.file_set.loadable]
    return next((v for v in loadable if v.fits == "fits"), next((v for v in loadable if v.fits != "no"),
                                                                 loadable[0] if loadable else None))


def read_verdicts(entries: list[LibraryEntry], budget: MachineBudget) -> dict[str, FitVerdict | None]:
    """Each entry's verdict from its own folder (no hub: offline and your own folders too), by model id; None for
    a folder with a problem (the entry says why)."""
    return {entry.model_id: folder_verdict(entry.path, budget) for entry in entries}


class LibraryTab(QWidget):
    """``use_requested(entry, verdict or None)``: Use on an entry."""

    use_requested = Signal(object, object)

    def __init__(self, hub: ModelsHub, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.hub = hub
        self.entries: list[LibraryEntry] = []
        self.verdicts: dict[str, FitVerdict | None] = {}
        self.confirm: Callable[[str, str], bool] = lambda title, text: ask(self, title, text)  # tests answer it
        self.status_label = plain_label(word_wrap=True)
        self.list = TextListView()
        self.list.selectionModel().currentChanged.connect(lambda *_: self._enable())
        self.use_button = QPushButton("Use")
        self.show_button = QPushButton("Show folder")
        self.delete_button = QPushButton("Delete…")
        self.add_button = QPushButton("Add folder…")
        self.use_button.clicked.connect(self._use)
        self.show_button.clicked.connect(self._show_folder)
        self.delete_button.clicked.connect(lambda: self.delete_selected())
        self.add_button.clicked.connect(lambda: self.add_folder())
        buttons = QHBoxLayout()
        for button in (self.add_button, self.show_button, self.delete_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.use_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.status_label)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        self.loading = False
        self.notice = ""  # what the last action did, said once above the list
        self._reads = 0  # reloads asked for: only the latest one's listing is shown
        self._enable()

    def reload(self) -> None:
        """The library read again off the GUI thread, then each entry's verdict from its own folder. Reads run
        side by side (opening the browser, its tab and Add folder each ask): one that ends after a later one
        is dropped, or a folder just added would vanish from the list."""
        self.loading = True
        self.status_label.setText("Reading the library…")
        self._reads += 1
        read = self._reads
        self.hub.entries(self).success(lambda entries: self._show_entries(entries, read)).failure(
            lambda exc: self._failed(exc, read))

    def _failed(self, exc: Exception, read: int) -> None:
        if read != self._reads:
            return
        self.loading = False
        self.status_label.setText(f"The library can't be read: {exc}")

    def _show_entries(self, entries: list[LibraryEntry], read: int) -> None:
        if read != self._reads:
            return
        self.entries = entries
        self.loading = False
        total = sum(entry.size_bytes for entry in entries)
        self.status_label.setText(f"{self.notice}{len(entries)} model(s), {format_bytes(total)} on disk: Nalar's "
                                  "downloads, the Hugging Face cache and the folders you added.")
        self.notice = ""
        self.refresh()
        todo = [e for e in entries if self.verdicts.get(e.model_id) is None]  # a finished download: now it has one
        machine = self.hub.machine
        if todo and machine is not None:
            run_blocking("Working out the library's verdicts", lambda: read_verdicts(todo, machine.budget),
                         parent=self).success(self._add_verdicts)

    def _add_verdicts(self, found: dict[str, FitVerdict | None]) -> None:
        self.verdicts.update(found)
        self.refresh()

    def refresh(self) -> None:
        rows = []
        for entry in self.entries:
            verdict = self.verdicts.get(entry.model_id)
            rows.append(TextRow(str(entry.path), library_line(entry, verdict.text() if verdict else None)))
        self.list.rows.show(rows)
        self._enable()

    def selected(self) -> LibraryEntry | None:
        key = self.list.current_key()
        return next((entry for entry in self.entries if str(entry.path) == key), None)

    def _enable(self) -> None:
        entry = self.selected()
        self.use_button.setEnabled(entry is not None and not entry.problem)
        self.show_button.setEnabled(entry is not None)
        self.delete_button.setEnabled(entry is not None)
        self.delete_button.setText("Forget folder…" if entry is not None and entry.source == "folder" else "Delete…")

    def _use(self) -> None:
        entry = self.selected()
        if entry is not None and not entry.problem:
            self.use_requested.emit(entry, self.verdicts.get(entry.model_id))

    def _show_folder(self) -> None:
        entry = self.selected()
        if entry is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(entry.path)))

    def delete_selected(self) -> Operation[int] | None:
        """Asks first, naming the bytes freed; a folder of your own is only forgotten (its files stay). Deleting
        gigabytes takes a while: it runs off the GUI thread. None when the user said no (or nothing is selected)."""
        entry = self.selected()
        if entry is None:
            return None
        library = self.hub.library
        if entry.source == "folder":
            if not self.confirm("Forget folder", f"Forget {entry.path}?\n\nIts files stay where they are."):
                return None

            def work() -> int:
                library.remove_folder(entry.path)
                return 0
        else:
            if not self.confirm("Delete model", delete_question(entry)):
                return None

            def work() -> int:
                return library.delete(entry)
        self.delete_button.setEnabled(False)
        self.status_label.setText(f"Deleting {entry.model_id}…" if entry.source != "folder" else "")
        return run_blocking(f"Deleting {entry.model_id}", work, parent=self).success(
            lambda freed: self._deleted(entry, freed)).failure(
            lambda exc: self.status_label.setText(f"{entry.model_id} was not deleted: {exc}"))

    def _deleted(self, entry: LibraryEntry, freed: int) -> None:
        if entry.source != "folder":
            self.notice = f"Deleted {entry.model_id}: {format_bytes(freed)} freed. "
        self.reload()

    def add_folder(self, folder: str | Path | None = None) -> bool:
        """``folder`` skips the picker (tests). A folder Nalar can't load is still listed, with why."""
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Add a model folder (it holds config.json)")
            if not folder:
                return False
        self.hub.library.add_folder(Path(folder).expanduser())
        self.reload()
        return True

