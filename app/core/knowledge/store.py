"""The knowledge index as the window and the terminal see it: collections, their skipped files, and search.

One SQLite file per data dir (``db.knowledge_path()``: ``<data>/knowledge.sqlite3``, never the history's
database). ``sync.sync_collection`` fills it; this reads it and adds or removes collections. A store may be used
from more than one thread (a lock serializes its connection).
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.chat.history_search import query_terms
from app.core.knowledge.db import KnowledgeUnavailable, connect
from app.core.knowledge.vectors import load_vectors

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

NAME = re.compile(r"^[\w][\w .+-]{0,63}$")
# Words that carry no topic: left out of the OR query, so "what is the boiling point" ranks by "boiling" and "point",
# and each left out saves FTS5 a read of a long doclist.
STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in into is it its me "
    "my of on or our should so than that the their them then there these they this to was we were what when where "
    "which who whom why will with would you your about".split())


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
    # Higher is better. BM25 ranking: SQLite's bm25() negated. Hybrid: the Reciprocal Rank Fusion score, the sum
    # over BM25 and vector ranks of 1 / (60 + rank), at most 2/61 (first in both) (hybrid.py).
    score: float
    tokens: int  # approximate token count used for budgets (passages.approx_tokens)

    @property
    def place(self) -> str:
        """"page 3" or "lines 10-24": where in the file it is."""
        if self.page is not None:
            return f"page {self.page}"
        if self.line_start is not None:
            end = self.line_end if self.line_end is not None else self.line_start
            return f"line {self.line_start}" if end == self.line_start else f"lines {self.line_start}-{end}"
        return ""


@dataclass(frozen=True)
class SkippedFile:
    path: Path
    reason: str  # "binary file named .txt", "not a regular file (FIFO)", "over 50 MB", …


def fts_query(query: str) -> str:
    """The words of ``query`` as an FTS5 expression any of which may match (BM25 ranks how many and how rare):
    each a quoted string, so ``"``, ``*``, ``-``, ``NEAR``, ``OR``, ``:`` and ``^`` are only text; control characters
    and unpaired surrogates dropped and at most 64 words kept (history_search.query_terms); empty if nothing
    is left to search for."""
    words = [word for word in query_terms(query).words if any(char.isalnum() for char in word)]
    kept = [word for word in words if word.lower().strip("?!.,;:'\"()") not in STOPWORDS] or words
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in kept)


def check_name(name: str) -> str:
    """``name`` stripped, or ValueError saying what a collection's name may be."""
    cleaned = name.strip()
    if not NAME.match(cleaned):
        raise ValueError(f"{name!r} can't name a collection: use 1-64 letters, digits, spaces, '.', '+', '-' or "
                         "'_', starting with a letter or digit")
    return cleaned


class KnowledgeStore:
    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._db = connect(db_path)
        self._lock = threading.Lock()

    def collections(self) -> list[Collection]:
        """Every collection, by name, with its counts."""
        with self._lock:
            rows = self._db.execute(
                "SELECT c.name, c.folders, c.synced_at, "
                "(SELECT count(*) FROM files f WHERE f.collection = c.name AND f.reason IS NULL), "
                "(SELECT count(*) FROM passages p JOIN files f ON f.id = p.file_id WHERE f.collection = c.name), "
                "(SELECT count(*) FROM files f WHERE f.collection = c.name AND f.reason IS NOT NULL) "
                "FROM collections c ORDER BY c.name COLLATE NOCASE").fetchall()
        return [Collection(name, tuple(Path(folder) for folder in json.loads(folders)), files, passages, skipped,
                           None if synced is None else datetime.fromtimestamp(synced, timezone.utc))
                for name, folders, synced, files, passages, skipped in rows]

    def collection(self, name: str) -> Collection:
        """The collection called ``name``, or KeyError naming the ones there are."""
        everything = self.collections()
        found = next((c for c in everything if c.name == name), None)
        if found is None:
            known = ", ".join(c.name for c in everything) or "none yet"
            raise KeyError(f"no knowledge collection is called {name!r} (there are: {known})")
        return found

    def add(self, name: str, folders: list[Path]) -> Collection:
        """A new collection of ``folders`` (resolved: a link to a folder is the user's choice, made once here), or
        the existing one with these folders added. ValueError for a bad name or a folder that isn't one. Nothing
        is read yet: ``sync_collection`` does that."""
        name = check_name(name)
        resolved: list[Path] = []
        for folder in folders:
            target = Path(folder).expanduser().resolve()
            if not target.is_dir():
                raise ValueError(f"{folder} is not a folder: give the folder that holds the documents")
            if target not in resolved:
                resolved.append(target)
        if not resolved:
            raise ValueError("a collection needs at least one folder")
        with self._lock:
            row = self._db.execute("SELECT folders FROM collections WHERE name = ?", (name,)).fetchone()
            before = [Path(folder) for folder in json.loads(row[0])] if row else []
            merged = before + [folder for folder in resolved if folder not in before]
            self._db.execute("INSERT INTO collections (name, folders) VALUES (?, ?) ON CONFLICT (name) DO UPDATE "
                             "SET folders = excluded.folders", (name, json.dumps([str(f) for f in merged])))
        return self.collection(name)

    def remove(self, name: str) -> None:
        """The collection and everything indexed for it (KeyError if there is none such)."""
        self.collection(name)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM collections WHERE name = ?", (name,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def search(self, name: str | list[str], query: str, *, limit: int = 8) -> list[Passage]:
        """The passages of the collection(s) that best match ``query`` (BM25, best first). Any text is a valid query:
        operators are only words, and a query of no words gives nothing."""
        names = [name] if isinstance(name, str) else list(name)
        expression = fts_query(query)
        if not expression or not names or limit <= 0:
            return []
        marks = ", ".join("?" * len(names))
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT p.id, f.collection, f.path, p.page, p.line_start, p.line_end, p.text, p.tokens, "
                    "bm25(passage_search) AS score FROM passage_search JOIN passages p ON p.id = passage_search.rowid "
                    f"JOIN files f ON f.id = p.file_id WHERE passage_search MATCH ? AND f.collection IN ({marks}) "
                    "ORDER BY score LIMIT ?", (expression, *names, limit)).fetchall()
            except sqlite3.OperationalError as exc:  # a query FTS5 still refuses: nothing found, never a crash
                if "fts5" in str(exc) or "syntax" in str(exc):
                    return []
                raise
        return [Passage(pid, coll, Path(path), page, start, end, text, -score, tokens)
                for pid, coll, path, page, start, end, text, tokens, score in rows]

    def passages(self, ids: list[int]) -> list[Passage]:
        """The passages with these ids (score 0), in that order; an id no longer indexed is left out."""
        marks = ", ".join("?" * len(ids))
        with self._lock:
            rows = self._db.execute(
                "SELECT p.id, f.collection, f.path, p.page, p.line_start, p.line_end, p.text, p.tokens FROM passages p "
                f"JOIN files f ON f.id = p.file_id WHERE p.id IN ({marks})", ids).fetchall()
        by_id = {pid: Passage(pid, coll, Path(path), page, start, end, text, 0.0, tokens)
                 for pid, coll, path, page, start, end, text, tokens in rows}
        return [by_id[pid] for pid in ids if pid in by_id]

    def vectors(self, names: list[str], model: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The collections' passage ids and vectors of ``model``. Read at each search: the window and the terminal
        open a store per question, and 5,400 vectors of 384 floats read in about 30 ms on 2 cores."""
        with self._lock:
            return load_vectors(self._db, names, model)

    def embedder_setting(self) -> str:
        """The embedding model chosen for this index: "" (find one), "off", or a folder."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
        return str(row[0]) if row else ""

    def set_embedder_setting(self, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO meta (key, value) VALUES ('embedder', ?) ON CONFLICT (key) DO UPDATE "
                             "SET value = excluded.value", (value,))

    def skipped(self, name: str) -> list[SkippedFile]:
        """The collection's files that were not indexed, each with its reason, by path."""
        with self._lock:
            rows = self._db.execute("SELECT path, reason FROM files WHERE collection = ? AND reason IS NOT NULL "
                                    "ORDER BY path", (name,)).fetchall()
        return [SkippedFile(Path(path), reason) for path, reason in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


__all__ = ["Collection", "KnowledgeStore", "KnowledgeUnavailable", "Passage", "SkippedFile", "fts_query"]
