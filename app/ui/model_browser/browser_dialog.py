"""ModelBrowser: Engine → Choose model…, the model browser. Discover searches the hub with this machine's verdict
per file set, Downloads is the window's queue, Library what is on disk. *Use* ends it as the welcome dialog's
choice does: ``engine_update`` holds the EngineConfig fields and the dialog is accepted.

The queue and the library belong to the window (``ModelsHub``): closing the browser leaves downloads running.
The search belongs to the dialog: closing it drops the running query and waits for its threads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QDialog, QHBoxLayout, QPushButton, QTabWidget, QVBoxLayout, QWidget

from app.core.hub.library import LibraryEntry
from app.core.hub.queue import QueueItem
from app.core.hub.search import HubModel
from app.core.hub.verdicts import FitVerdict, catalog_models
from app.core.models.hub_download import download_dir
from app.ui.chat.plain_text import plain_label
from app.ui.controllers.operations import run_blocking
from app.ui.model_browser.discover_tab import DiscoverTab
from app.ui.model_browser.downloads_tab import DownloadsTab
from app.ui.model_browser.hub_search import HubSearch
from app.ui.model_browser.library_tab import LibraryTab, best_verdict
from app.ui.model_browser.models_hub import Machine, ModelsHub, engine_update
from app.ui.model_browser.search_state import ResultRow, SearchState


class ModelBrowser(QDialog):
    """After ``accepted``, :attr:`engine_update` holds the EngineConfig fields to change."""

    def __init__(self, hub: ModelsHub, parent: QWidget | None = None, *, endpoint: str | None = None,
                 debounce_ms: int | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(1100, 720)
        self.hub = hub
        self.engine_update: dict[str, Any] = {}
        extra = {} if debounce_ms is None else {"debounce_ms": debounce_ms}
        self.search = HubSearch(SearchState(), hub.machine.budget if hub.machine else None, hub.cache, self,
                                endpoint=endpoint, **extra)
        self.discover = DiscoverTab(self.search)
        self.downloads = DownloadsTab(hub)
        self.library = LibraryTab(hub)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.discover, "Discover")
        self.tabs.addTab(self.downloads, "Downloads")
        self.tabs.addTab(self.library, "Library")
        self.machine_label = plain_label("Reading this machine's memory…", word_wrap=True)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        bottom = QHBoxLayout()
        bottom.addWidget(self.machine_label, 1)
        bottom.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addLayout(bottom)
        self.discover.download_requested.connect(self.queue_download)
        self.downloads.use_requested.connect(self.use_download)
        self.library.use_requested.connect(self.use_entry)
        hub.feed.item_changed.connect(self._download_changed)
        self.tabs.currentChanged.connect(lambda index: self.library.reload() if index == 2 else None)
        hub.read_machine(self._machine_known, self)

    def _machine_known(self, machine: Machine) -> None:
        self.search.budget = machine.budget
        self.machine_label.setText(f"This machine: {machine.budget.describe()}. Verdicts are the planner's, "
                                   "before download; vLLM measures the real figures when the model starts.")
        run_blocking("Planning the catalog for this machine", lambda: catalog_models(machine.budget),
                     parent=self).success(self._catalog_planned)
        self.library.reload()

    def _catalog_planned(self, planned: list[tuple[HubModel, list[FitVerdict]]]) -> None:
        self.discover.set_catalog([ResultRow(model, tuple(verdicts)) for model, verdicts in planned])

    # ---- downloads -----------------------------------------------------------------------------------------

    def queue_download(self, repo_id: str, file_set: str) -> None:
        self.downloads.show_problem("")
        self.hub.add(repo_id, file_set or None, self).success(self.downloads.update_item).failure(
            lambda exc: self.downloads.show_problem(f"{repo_id} was not queued: {exc}"))
        self.tabs.setCurrentWidget(self.downloads)

    def _download_changed(self, item: QueueItem) -> None:
        if item.state == "done" and self.library.isVisible():
            self.library.reload()

    # ---- use -----------------------------------------------------------------------------------------------

    def _verdict_of(self, repo_id: str) -> FitVerdict | None:
        """The verdict this browser already has for ``repo_id``: a search result's, the catalog's, the library's."""
        for row in [*self.search.state.rows, *self.discover.catalog]:
            if row.model.repo_id == repo_id and row.verdicts:
                return best_verdict(list(row.verdicts))
        return self.library.verdicts.get(repo_id)

    def use_download(self, item: QueueItem) -> None:
        """A finished download: its folder (a file set's own), the verdict of that set where the browser has it."""
        verdict = next((v for row in [*self.search.state.rows, *self.discover.catalog] if row.model.repo_id ==
                        item.repo_id for v in row.verdicts or () if v.file_set.label == item.file_set), None)
        path = Path(item.target) if item.target else download_dir(item.repo_id)
        self.choose(item.repo_id, path, verdict or self._verdict_of(item.repo_id))

    def use_entry(self, entry: LibraryEntry, verdict: FitVerdict | None) -> None:
        self.choose(entry.model_id, entry.path, verdict or self._verdict_of(entry.model_id))

    def choose(self, model_id: str, path: Path, verdict: FitVerdict | None) -> None:
        """As the welcome dialog's choice: the engine update kept, the model marked used, the dialog accepted."""
        kv = self.hub.machine.kv_cache_dtype if self.hub.machine else "auto"
        self.engine_update = engine_update(path, verdict, kv)
        self.hub.library.mark_used(model_id)
        self.accept()

    def done(self, result: int) -> None:
        """The search is dropped with the dialog (the window waits for its threads); the queue's run on."""
        self.search.close()
        super().done(result)
