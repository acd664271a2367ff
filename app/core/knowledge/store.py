"""The knowledge index: one SQLite file per data dir (``<data>/knowledge.sqlite3``, never the history's database).

Interface first (issue 51); the bodies follow."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class Collection:
    name: str
    folders: tuple[Path, ...]
    files: int
    passages: int
    skipped: int
    synced_at: datetime | None


@dataclass(frozen=True)
class Passage:
    passage_id: int
    collection: str
    path: Path  # absolute, always inside one of the collection's folders
    page: int | None  # 1-based PDF page
    line_start: int | None  # 1-based line span for text files
    line_end: int | None
    text: str
    score: float  # BM25, higher is better (SQLite's bm25() negated)
    tokens: int  # approximate token count used for budgets


@dataclass(frozen=True)
class SkippedFile:
    path: Path
    reason: str  # "binary file named .txt", "not a regular file (FIFO)", "over 50 MB", …


class KnowledgeStore:
    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path

    def collections(self) -> list[Collection]:
        raise NotImplementedError

    def add(self, name: str, folders: list[Path]) -> Collection:
        raise NotImplementedError

    def remove(self, name: str) -> None:
        raise NotImplementedError

    def search(self, name: str | list[str], query: str, *, limit: int = 8) -> list[Passage]:
        raise NotImplementedError

    def skipped(self, name: str) -> list[SkippedFile]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
