"""One Nalar per user: a lock file in the data dir, held with flock for the process's life and naming
its pid. The kernel drops the lock when the process ends, however it ends, so no stale lock stays."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from app.core.settings import paths

LOCK_FILE = "nalar.lock"


class InstanceLock:
    """``acquire()`` is True for the first Nalar; for a second, ``holder`` is the first one's pid."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.private_dir(paths.data_dir()) / LOCK_FILE
        self.holder: int | None = None
        self._fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, paths.PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            self.holder = int(text) if text.isdigit() else None
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def already_running(self) -> str:
        """The message for a second Nalar."""
        who = f" (process {self.holder})" if self.holder else ""
        return (f"Nalar is already running{who}. Switch to its window, or close it before starting another: "
                "two windows would write the same history.")
