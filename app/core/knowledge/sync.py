"""Bringing a collection's index up to date with its folders: only changed files are read again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.knowledge.store import SkippedFile


@dataclass(frozen=True)
class SyncProgress:
    files_done: int
    files_total: int
    current: str
    passages_added: int


@dataclass(frozen=True)
class SyncResult:
    read: int
    unchanged: int
    removed: int
    skipped: tuple[SkippedFile, ...]
    failed: tuple[SkippedFile, ...]


def sync_collection(store_path: Path, name: str, *, on_progress: Callable[[SyncProgress], None] | None = None,
                    cancelled: Callable[[], bool] = lambda: False) -> SyncResult:
    raise NotImplementedError
