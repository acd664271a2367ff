"""What the window keeps for the model browser across its openings: the download queue (made once per window,
closed with it, so no download thread outlives the window), the library, the verdict cache and this machine.

The queue calls back on its worker threads; ``DownloadsFeed`` keeps the latest state per item and hands them to
the GUI thread through a queued signal, at most ``FEED_HZ`` times a second, as the engine bridge throttles gauges.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from app.core.hub import library as library_files
from app.core.hub import queue as queue_files
from app.core.hub.library import LibraryEntry, ModelLibrary
from app.core.hub.queue import DownloadQueue, QueueItem
from app.core.hub.verdicts import FitVerdict, MachineBudget, VerdictCache, this_machine
from app.core.models.model_catalog import DEFAULT_CONTEXT_CAP
from app.core.settings.settings import is_fp8
from app.ui.controllers.operations import Operation, run_blocking

log = logging.getLogger(__name__)
FEED_HZ = 10


class DownloadsFeed(QObject):
    """The queue's changes, from its threads to the GUI thread: the latest state of each item, coalesced."""

    item_changed = Signal(object)  # QueueItem, on the GUI thread
    _wake = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._latest: dict[str, QueueItem] = {}
        self._woken = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(1000 // FEED_HZ)
        self._timer.timeout.connect(self.deliver)
        self._wake.connect(self._schedule, Qt.ConnectionType.QueuedConnection)

    def post(self, item: QueueItem) -> None:
        """Any thread: keep the item's latest state; the first change since the last delivery wakes the GUI."""
        with self._lock:
            self._latest[item.item_id] = item
            wake, self._woken = not self._woken, True
        if wake:
            try:
                self._wake.emit()
            except RuntimeError:  # the window and this feed are gone; the queue is closing
                log.debug("downloads feed gone; dropped a queue change")

    def _schedule(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def deliver(self) -> None:
        with self._lock:
            items, self._latest, self._woken = list(self._latest.values()), {}, False
        for item in items:
            self.item_changed.emit(item)


@dataclass(frozen=True)
class Machine:
    """This machine, read once off the GUI thread: the verdicts' budget and the KV dtype a chosen model gets."""

    budget: MachineBudget
    kv_cache_dtype: str


def read_machine() -> Machine:
    from app.engine.machine.capability import probe_hardware, recommended_kv_dtype

    return Machine(this_machine(), recommended_kv_dtype(probe_hardware()))


def engine_update(path: Path, verdict: FitVerdict | None, kv_cache_dtype: str) -> dict[str, Any]:
    """The EngineConfig fields a chosen model sets, as the welcome dialog's choice does: the folder, the KV dtype,
    and the context its verdict found room for (capped as the catalog caps it); unknown: the context stays."""
    update: dict[str, Any] = {"model": str(path), "kv_cache_dtype": kv_cache_dtype}
    if verdict is not None:
        context = verdict.max_context_fp8 if is_fp8(kv_cache_dtype) else verdict.max_context_bf16
        if context >= 256:
            update["max_model_len"] = min(context, DEFAULT_CONTEXT_CAP)
    return update


class ModelsHub(QObject):
    """The window's one queue and library. ``queue`` is made on first use, or at the window's start when an
    earlier session left downloads unfinished (they resume)."""

    library_changed = Signal()

    def __init__(self, parent: QObject | None = None, *, queue_file: Path | None = None,
                 library_file: Path | None = None) -> None:
        super().__init__(parent)
        # The terminal's `nalar models` and `nalar download` share these files: one queue and one library per user.
        self.queue_file = queue_file or queue_files.default_state_file()
        self.library_file = library_file or library_files.default_state_file()
        self.feed = DownloadsFeed(self)
        self.cache = VerdictCache()
        self.machine: Machine | None = None
        # Made here, on the GUI thread: made lazily, library reads on worker threads each made their own, and one
        # made before Add folder saved, but kept after it, listed the library without the folder (make test, twice).
        self.library = ModelLibrary(self.library_file)
        self._queue: DownloadQueue | None = None
        self.closed = False

    @property
    def queue(self) -> DownloadQueue:
        if self._queue is None:
            assert not self.closed, "the window closed its download queue"
            self._queue = DownloadQueue(self.queue_file, on_change=self.feed.post)
        return self._queue

    @property
    def queue_open(self) -> bool:
        return self._queue is not None

    def resume_unfinished(self) -> None:
        """At the window's start: a queue an earlier session left (its state file) starts again and resumes."""
        if self.queue_file.exists() and not self.closed:
            _ = self.queue

    def read_machine(self, done: Callable[[Machine], object], owner: QObject) -> Operation[Machine] | None:
        """``done`` with this machine, read off the GUI thread the first time; dropped if ``owner`` is gone."""
        if self.machine is not None:
            done(self.machine)
            return None

        def keep(machine: Machine) -> None:
            self.machine = machine
            done(machine)

        return run_blocking("Reading this machine's memory", read_machine, parent=owner).success(keep)

    def add(self, repo_id: str, file_set: str | None, owner: QObject) -> Operation[QueueItem]:
        """Queued off the GUI thread: ``add`` reads the hub's file listing and checks the free disk. The outcome
        is dropped if ``owner`` (the browser) is gone by then; the queue has the item anyway."""
        queue = self.queue
        return run_blocking(f"Queueing {repo_id}", lambda: queue.add(repo_id, file_set), parent=owner)

    def entries(self, owner: QObject) -> Operation[list[LibraryEntry]]:
        """The library read off the GUI thread (it walks folders and the hub cache)."""
        return run_blocking("Reading the model library", lambda: self.library.entries(), parent=owner)

    def close(self) -> None:
        """The window closes: the queue's workers stop (unfinished items resume next start)."""
        self.closed = True
        if self._queue is not None:
            self._queue.close()
            self._queue = None
