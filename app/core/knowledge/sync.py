"""Bringing a collection's index up to date with its folders: only files whose size or mtime changed are read.

Each file's passages are written with its size and mtime in one transaction, so a sync killed mid-index leaves
every file either indexed whole or not at all, and the next one reads only what is missing. A file that changed
while it was read (its size or mtime differ before and after) is read once more, then left for the next sync with
that reason. A file that fails is named with its reason; the rest go on. ``cancelled`` is checked between files,
while a PDF's reader runs (it is ended at once) and every CANCEL_EVERY passages of a long file (whose transaction
is then rolled back). With an embedding model, the passages with no vector for it are then embedded in batches
(vectors.embed_missing: cancellable and resumable the same way). Runs on any thread but the GUI's: it opens its
own connection.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from app.core.knowledge.db import connect
from app.core.knowledge.embedder import Embedder
from app.core.knowledge.passages import approx_tokens, pieces
from app.core.knowledge.reader import Document, ReadCancelled, Unreadable, read_document
from app.core.knowledge.store import SkippedFile, check_name
from app.core.knowledge.vectors import Embedded, embed_missing
from app.core.knowledge.walk import Found, walk

CANCEL_EVERY = 256
WALK_SKIP = -2  # size stored for an entry the walk skipped (a link, a FIFO, a kind not indexed): decided anew each sync
FAILED = -1  # size stored for a file whose read failed: read again next sync


@dataclass(frozen=True)
class SyncProgress:
    files_done: int
    files_total: int
    current: str
    passages_added: int
    phase: Literal["reading", "embedding"] = "reading"
    embedded: int = 0  # while embedding: passages embedded so far, of to_embed
    to_embed: int = 0


@dataclass(frozen=True)
class SyncResult:
    read: int
    unchanged: int
    removed: int
    skipped: tuple[SkippedFile, ...]
    failed: tuple[SkippedFile, ...]
    cancelled: bool = False
    embedded: Embedded | None = None  # None: no embedding model (or the sync stopped before it)


class _Stop(Exception):
    pass


def sync_collection(store_path: Path, name: str, *, on_progress: Callable[[SyncProgress], None] | None = None,
                    cancelled: Callable[[], bool] = lambda: False, embedder: Embedder | None = None) -> SyncResult:
    """Index what changed in collection ``name`` of the index at ``store_path``, then embed what has no vector
    for ``embedder``'s model; KeyError if there is no such collection."""
    name, progress = check_name(name), on_progress or (lambda progress: None)
    db = connect(store_path)
    try:
        result = _Sync(db, name, progress, cancelled).run()
        if result.cancelled or embedder is None:
            return result
        files = result.read + result.unchanged

        def report(done: int, total: int) -> None:
            progress(SyncProgress(files, files, "", 0, "embedding", done, total))

        embedded = embed_missing(db, name, embedder, report, cancelled)
        return replace(result, embedded=embedded, cancelled=embedded.cancelled)
    finally:
        db.close()


class _Sync:
    def __init__(self, db: sqlite3.Connection, name: str, on_progress: Callable[[SyncProgress], None],
                 cancelled: Callable[[], bool]) -> None:
        self.db, self.name, self.on_progress, self.cancelled = db, name, on_progress, cancelled
        self.read = self.unchanged = self.added = 0
        self.failed: list[SkippedFile] = []

    def run(self) -> SyncResult:
        row = self.db.execute("SELECT folders FROM collections WHERE name = ?", (self.name,)).fetchone()
        if row is None:
            raise KeyError(f"no knowledge collection is called {self.name!r}")
        folders = tuple(Path(folder) for folder in json.loads(row[0]))
        walked = walk(folders, self.cancelled)
        self.failed += [SkippedFile(folder, "the folder is missing (moved, deleted, or a drive not mounted): its "
                                    "files are kept until it is back or removed from the collection")
                        for folder in walked.folders_missing]
        known = {Path(path): (file_id, size, mtime, reason) for file_id, path, size, mtime, reason in self.db.execute(
            "SELECT id, path, size, mtime_ns, reason FROM files WHERE collection = ?", (self.name,))}
        removed = 0 if walked.cancelled else self._drop_gone(known, walked.found.keys() | walked.skipped.keys(),
                                                             walked.folders_missing)
        self._write_walk_skips(known, walked.skipped)
        todo = sorted(walked.found.values(), key=lambda found: str(found.path))
        stopped = walked.cancelled
        for done, found in enumerate(todo):
            if stopped or self.cancelled():
                stopped = True
                break
            self.on_progress(SyncProgress(done, len(todo), str(found.path), self.added))
            before = known.get(found.path)
            if before is not None and before[1:3] == (found.size, found.mtime_ns):
                self.unchanged += 1
                continue
            try:
                self._index(found)
            except _Stop:
                stopped = True
        if not stopped:
            self.on_progress(SyncProgress(len(todo), len(todo), "", self.added))
            self.db.execute("UPDATE collections SET synced_at = ? WHERE name = ?", (time.time(), self.name))
        skipped = tuple(SkippedFile(Path(path), reason) for path, reason in self.db.execute(
            "SELECT path, reason FROM files WHERE collection = ? AND reason IS NOT NULL AND size != ? ORDER BY path",
            (self.name, FAILED)))
        return SyncResult(self.read, self.unchanged, removed, skipped, tuple(self.failed), stopped)

    def _drop_gone(self, known: dict[Path, tuple[int, int, int, str | None]], present: set[Path],
                   missing: list[Path]) -> int:
        gone = [known[path][0] for path in known
                if path not in present and not any(path.is_relative_to(folder) for folder in missing)]
        if gone:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("DELETE FROM files WHERE id = ?", [(file_id,) for file_id in gone])
            self.db.execute("COMMIT")
        return len(gone)

    def _write_walk_skips(self, known: dict[Path, tuple[int, int, int, str | None]],
                          skipped: dict[Path, SkippedFile]) -> None:
        changed = [entry for path, entry in skipped.items() if known.get(path, (0, 0, 0, None))[3] != entry.reason]
        if not changed:
            return
        self.db.execute("BEGIN IMMEDIATE")
        for entry in changed:
            self._replace(entry.path, WALK_SKIP, 0, entry.reason)
        self.db.execute("COMMIT")

    def _replace(self, path: Path, size: int, mtime_ns: int, reason: str | None, note: str = "") -> int:
        """Inside a transaction: the file's row (and so its passages) replaced by a new one; its id."""
        self.db.execute("DELETE FROM files WHERE collection = ? AND path = ?", (self.name, str(path)))
        cursor = self.db.execute("INSERT INTO files (collection, path, size, mtime_ns, reason, note) "
                                 "VALUES (?, ?, ?, ?, ?, ?)", (self.name, str(path), size, mtime_ns, reason, note))
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def _index(self, found: Found) -> None:
        seen = (found.size, found.mtime_ns)
        for attempt in (1, 2):
            try:
                document = read_document(found.path, self.cancelled)
            except ReadCancelled:
                raise _Stop from None
            except Unreadable as exc:
                size, mtime = (FAILED, 0) if exc.retry else seen
                self._record(found.path, size, mtime, exc.reason, failed=exc.retry)
                return
            after = _stat(found.path)
            if after == seen:
                self._store(found.path, seen, document)
                return
            if attempt == 1 and after is not None:
                seen = after
        self._record(found.path, FAILED, 0, "it changed while being read, twice: it is read again next sync",
                     failed=True)

    def _record(self, path: Path, size: int, mtime_ns: int, reason: str, *, failed: bool) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self._replace(path, size, mtime_ns, reason)
        self.db.execute("COMMIT")
        if failed:
            self.failed.append(SkippedFile(path, reason))

    def _store(self, path: Path, seen: tuple[int, int], document: Document) -> None:
        """The file's passages and its size and mtime, in one transaction (rolled back if cancelled meanwhile)."""
        rows = _passages(document)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            file_id = self._replace(path, *seen, None, document.note)
            for start in range(0, len(rows), CANCEL_EVERY):
                if start and self.cancelled():
                    raise _Stop
                self.db.executemany("INSERT INTO passages (file_id, page, line_start, line_end, text, tokens) "
                                    "VALUES (?, ?, ?, ?, ?, ?)",
                                    [(file_id, *row) for row in rows[start:start + CANCEL_EVERY]])
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.read += 1
        self.added += len(rows)


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def _passages(document: Document) -> list[tuple[int | None, int | None, int | None, str, int]]:
    """(page, line_start, line_end, text, tokens) of each passage: a PDF's by page, a text's by line span."""
    if document.is_pdf:
        return [(number, None, None, piece.text, approx_tokens(piece.text))
                for number, page in enumerate(document.pages, 1) for piece in pieces(page)]
    return [(None, piece.line_start, piece.line_end, piece.text, approx_tokens(piece.text))
            for piece in pieces(document.text)]
