"""A download queue: HubDownload objects run one or two at a time on worker threads, its state on disk.

Thread-based and Qt-free: ``on_change`` is called from worker threads with the item's new state (the window
hands it to the GUI thread). The state file keeps every item: a new queue on the same file starts the items
that were running or queued again (their partial bytes stay in the download folder, as ``HubDownload``
keeps them, so they resume with a Range request); paused items stay paused until resumed.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Literal, cast

from app.core.hub.repo_facts import VerdictCache, fetch_facts
from app.core.hub.search import check_online
from app.core.models.hub_download import (
    DownloadCancelled,
    DownloadError,
    DownloadProgress,
    HubDownload,
    download_dir,
    format_bytes,
    hub_endpoint,
    is_complete,
    models_dir,
)
from app.core.settings import paths

log = logging.getLogger(__name__)

ItemState = Literal["queued", "running", "paused", "done", "cancelled", "failed"]
DISK_MARGIN_BYTES = 1 << 30  # left free beside a download: a full disk breaks more than the download


@dataclass(frozen=True)
class QueueItem:
    item_id: str
    repo_id: str
    file_set: str | None  # the FileSet's label, None for the repo's default files
    state: ItemState
    done_bytes: int
    total_bytes: int
    bytes_per_s: float
    eta_s: float | None
    current_file: str
    error: str = ""
    file_done_bytes: int = 0  # of current_file
    file_total_bytes: int = 0
    files: tuple[str, ...] = ()  # the set's files; () for the repo's default files
    target: str = ""  # the download folder


def default_state_file() -> Path:
    """Where the window's and the terminal's queue keep their items: one queue per user."""
    return paths.data_dir() / "download-queue.json"


def free_disk_bytes(folder: Path) -> int:
    """Free bytes on the disk that holds ``folder`` (its nearest existing parent)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def target_for(repo_id: str, file_set: str | None) -> Path:
    """The repo's folder for its default files; a folder of its own for each other set, so two sets of one
    repo never share a completion marker."""
    base = download_dir(repo_id)
    if file_set is None:
        return base
    slug = "".join(c if c.isalnum() else "-" for c in file_set).strip("-").lower()
    return base.with_name(f"{base.name}--{slug}")


class DownloadQueue:
    def __init__(self, state_file: Path, *, parallel: int = 2, endpoint: str | None = None,
                 on_change: Callable[[QueueItem], None] | None = None) -> None:
        self.state_file = state_file
        self.parallel = max(1, min(parallel, 2))
        self.endpoint = (endpoint or hub_endpoint()).rstrip("/")
        self.on_change = on_change
        self._lock = threading.Lock()
        self._items: dict[str, QueueItem] = {}
        self._downloads: dict[str, HubDownload] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._stopping: dict[str, ItemState] = {}  # what a running item becomes once its worker stops
        self._closed = False
        for item in self._load():
            state: ItemState = "queued" if item.state == "running" else item.state
            self._items[item.item_id] = replace(item, state=state, bytes_per_s=0.0, eta_s=None)
        self._pump()

    # ---- the user's actions -----------------------------------------------------------------------

    def add(self, repo_id: str, file_set: str | None = None) -> QueueItem:
        """Queue a download. Blocks for the hub's file listing; raises DownloadError when the free disk is
        short (the message gives both numbers) or the set can't be loaded here, HubOffline, HubGated."""
        with self._lock:
            same = next((i for i in self._items.values() if (i.repo_id, i.file_set) == (repo_id, file_set)
                         and i.state in ("queued", "running", "paused")), None)
        if same is not None:
            return same
        check_online(self.endpoint)
        files = self._set_files(repo_id, file_set)
        target = target_for(repo_id, file_set)
        download = HubDownload(repo_id, endpoint=self.endpoint, target=target, only=files or None)
        _commit, listed = download.listing()
        total = sum(listed.values())
        here = 0 if is_complete(target) else download.bytes_here()
        needed, free = total - here, free_disk_bytes(target)
        if needed + DISK_MARGIN_BYTES > free:
            raise DownloadError(f"Not enough disk space for {repo_id}: it needs {format_bytes(needed)} more (and "
                                f"{format_bytes(DISK_MARGIN_BYTES)} kept free), {target.parent} has "
                                f"{format_bytes(free)} free. Fix: free disk space, or delete a model in the library.")
        item = QueueItem(uuid.uuid4().hex[:12], repo_id, file_set, "queued", here, total, 0.0, None, "",
                         files=files, target=str(target))
        self._set(item)
        self._pump()
        return item

    def pause(self, item_id: str) -> None:
        self._stop(item_id, "paused")

    def resume(self, item_id: str) -> None:
        with self._lock:
            item = self._items.get(item_id)
            if item is None or item.state not in ("paused", "failed", "cancelled"):
                return
        self._set(replace(item, state="queued", error=""))
        self._pump()

    def cancel(self, item_id: str) -> None:
        """Stops it and deletes its partial bytes (never a finished download)."""
        self._stop(item_id, "cancelled")

    def items(self) -> list[QueueItem]:
        with self._lock:
            return list(self._items.values())

    def forget(self, item_id: str) -> None:
        """Drops a done, cancelled or failed item from the list (its files stay where they are)."""
        with self._lock:
            item = self._items.get(item_id)
            if item is None or item.state not in ("done", "cancelled", "failed"):
                return
            del self._items[item_id]
        self._save()

    def close(self) -> None:
        """Stops the workers; running and queued items start again at the next start (the state file)."""
        with self._lock:
            self._closed = True
            running = list(self._downloads.items())
            threads = list(self._threads.values())
            for item_id, _download in running:
                self._stopping[item_id] = "queued"
        for _item_id, download in running:
            download.cancel()
        for thread in threads:
            thread.join(30)
        self._save()

    # ---- inside -----------------------------------------------------------------------------------

    def _set_files(self, repo_id: str, file_set: str | None) -> tuple[str, ...]:
        if file_set is None:
            return ()
        from app.core.hub.file_sets import file_sets

        facts = fetch_facts(repo_id, self.endpoint, VerdictCache())
        chosen = next((s for s in file_sets(facts.files, facts.configs, facts.index_totals) if s.label == file_set),
                      None)
        if chosen is None:
            raise DownloadError(f"{repo_id} has no file set {file_set!r} at its latest commit. Fix: search again.")
        if not chosen.loadable:
            raise DownloadError(f"{repo_id} {file_set} can't be loaded here: {chosen.note}")
        return chosen.files

    def _stop(self, item_id: str, state: ItemState) -> None:
        with self._lock:
            item = self._items.get(item_id)
            download = self._downloads.get(item_id)
            if item is None or item.state in ("done", "cancelled"):
                return
            if download is not None:
                self._stopping[item_id] = state
        if download is not None:
            download.cancel()  # the worker sets the state once the transfer stopped
            return
        if state == "cancelled":
            self._discard(item)
        self._set(replace(item, state=state, bytes_per_s=0.0, eta_s=None))

    def _pump(self) -> None:
        """Start queued items while fewer than ``parallel`` run."""
        with self._lock:
            if self._closed:
                return
            running = sum(1 for i in self._items.values() if i.state == "running")
            starting = [i for i in self._items.values() if i.state == "queued"][:max(0, self.parallel - running)]
            for item in starting:
                download = HubDownload(item.repo_id, endpoint=self.endpoint, target=Path(item.target),
                                       only=item.files or None, on_progress=partial(self._progress, item.item_id))
                self._downloads[item.item_id] = download
                thread = threading.Thread(target=self._work, args=(item.item_id, download), daemon=True,
                                          name=f"download-{item.repo_id}")
                self._threads[item.item_id] = thread
        for item in starting:
            self._set(replace(item, state="running"))
            self._threads[item.item_id].start()

    def _work(self, item_id: str, download: HubDownload) -> None:
        error, state = "", cast(ItemState, "done")
        try:
            download.run()
        except DownloadCancelled:
            with self._lock:
                state = self._stopping.pop(item_id, "paused")
        except DownloadError as exc:
            error, state = str(exc), "failed"
        except Exception as exc:  # a worker must end with a state the user sees, never silently
            log.exception("download of %s failed", download.repo_id)
            error, state = f"{type(exc).__name__}: {exc}", "failed"
        with self._lock:
            self._downloads.pop(item_id, None)
            self._threads.pop(item_id, None)
            item = self._items[item_id]
        if state == "cancelled":
            self._discard(item)
        done = item.total_bytes if state == "done" else item.done_bytes
        self._set(replace(item, state=state, error=error, done_bytes=done, bytes_per_s=0.0, eta_s=None))
        self._pump()

    def _progress(self, item_id: str, progress: DownloadProgress) -> None:
        with self._lock:
            item = self._items.get(item_id)
            if item is None:
                return
            item = replace(item, done_bytes=progress.done_bytes, total_bytes=progress.total_bytes,
                           bytes_per_s=progress.bytes_per_s, eta_s=progress.eta_s, current_file=progress.filename,
                           file_done_bytes=progress.file_done_bytes, file_total_bytes=progress.file_total_bytes)
            self._items[item_id] = item
        if self.on_change is not None:
            self.on_change(item)

    def _discard(self, item: QueueItem) -> None:
        """A cancelled item's partial download, deleted: only an unfinished folder inside Nalar's models folder."""
        target = Path(item.target)
        if target.parent == models_dir() and target.is_dir() and not is_complete(target):
            shutil.rmtree(target, ignore_errors=True)

    def _set(self, item: QueueItem) -> None:
        with self._lock:
            self._items[item.item_id] = item
        self._save()
        if self.on_change is not None:
            self.on_change(item)

    def _save(self) -> None:
        with self._lock:
            rows = [asdict(item) for item in self._items.values()]
        paths.write_private_text(self.state_file, json.dumps({"version": 1, "items": rows}, indent=1))

    def _load(self) -> list[QueueItem]:
        try:
            rows = json.loads(self.state_file.read_text(encoding="utf-8"))["items"]
            return [QueueItem(**{**row, "files": tuple(row.get("files") or ())}) for row in rows]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("the download queue's state file %s is unreadable (%s); starting empty", self.state_file, exc)
            return []
