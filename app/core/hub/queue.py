"""A download queue: HubDownload objects run one or two at a time on worker threads, its state on disk.

Thread-based and Qt-free: ``on_change`` is called from worker threads with the item's new state (the window
hands it to the GUI thread). Paused and running items are written to the state file, so a new queue on the
same file resumes them (the partial bytes stay in the download folder, as ``HubDownload`` keeps them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ItemState = Literal["queued", "running", "paused", "done", "cancelled", "failed"]


@dataclass(frozen=True)
class QueueItem:
    item_id: str
    repo_id: str
    file_set: str | None  # the FileSet's label, None for the whole repo's default files
    state: ItemState
    done_bytes: int
    total_bytes: int
    bytes_per_s: float
    eta_s: float | None
    current_file: str
    error: str = ""


class DownloadQueue:
    def __init__(self, state_file: Path, *, parallel: int = 2, endpoint: str | None = None,
                 on_change: Callable[[QueueItem], None] | None = None) -> None:
        raise NotImplementedError

    def add(self, repo_id: str, file_set: str | None = None) -> QueueItem:
        """Queue a download. Blocks for the hub's file listing; raises DownloadError when the free disk is
        short (the message gives both numbers), HubOffline, HubGated."""
        raise NotImplementedError

    def pause(self, item_id: str) -> None:
        raise NotImplementedError

    def resume(self, item_id: str) -> None:
        raise NotImplementedError

    def cancel(self, item_id: str) -> None:
        """Stops it and deletes its partial bytes."""
        raise NotImplementedError

    def items(self) -> list[QueueItem]:
        raise NotImplementedError

    def close(self) -> None:
        """Stops the workers; paused and running items resume at the next start (the state file)."""
        raise NotImplementedError
