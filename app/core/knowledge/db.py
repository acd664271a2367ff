"""The knowledge index's SQLite file: its schema, and a connection opened the one way every part uses.

One file per data dir, ``<data>/knowledge.sqlite3`` (0600), never the history's database: a collection can be
dropped or rebuilt without touching a conversation. WAL, so a search reads while a sync writes; each file's passages
and its size and mtime are written in one transaction, so a sync killed mid-file leaves that file as it was
before, and the next sync reads it again (nothing is indexed twice).

Passages are an FTS5 external-content table over ``passages`` (``porter unicode61``: "boiling" finds "boil"),
kept in step by triggers, ranked by bm25(). With an embedding model, ``vectors`` holds each passage's
(``hybrid.py`` fuses both rankings).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.core.settings import paths

SCHEMA_VERSION = 2  # 2: vectors, meta (an index of version 1 gains both when opened)
FILE_NAME = "knowledge.sqlite3"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS collections (name TEXT PRIMARY KEY, folders TEXT NOT NULL, synced_at REAL)",
    # reason NULL: indexed. A skipped file keeps its size and mtime too, so a sync with nothing changed opens nothing;
    # a failed one (it changed while read, a read error) is stored with size -1, so the next sync tries it again.
    "CREATE TABLE IF NOT EXISTS files (id INTEGER PRIMARY KEY, collection TEXT NOT NULL REFERENCES collections(name) "
    "ON DELETE CASCADE, path TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, reason TEXT, "
    "note TEXT NOT NULL DEFAULT '', UNIQUE (collection, path))",
    "CREATE TABLE IF NOT EXISTS passages (id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL REFERENCES files(id) "
    "ON DELETE CASCADE, page INTEGER, line_start INTEGER, line_end INTEGER, text TEXT NOT NULL, "
    "tokens INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS passages_file ON passages (file_id)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS passage_search USING fts5(text, content='passages', content_rowid='id', "
    "tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS passage_search_insert AFTER INSERT ON passages BEGIN "
    "INSERT INTO passage_search (rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER IF NOT EXISTS passage_search_delete AFTER DELETE ON passages BEGIN "
    "INSERT INTO passage_search (passage_search, rowid, text) VALUES ('delete', old.id, old.text); END",
    # One vector per passage and embedding model (embedder.Embedder.model_id): float32, unit length. A passage's
    # vectors go with it (its file's delete cascades to them).
    "CREATE TABLE IF NOT EXISTS vectors (passage_id INTEGER NOT NULL REFERENCES passages(id) ON DELETE CASCADE, "
    "model TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (passage_id, model)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS vectors_model ON vectors (model, passage_id)",
    # The index's own choices, shared by the window and the terminal: "embedder" is "" (find one), "off" or a folder.
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


class KnowledgeUnavailable(Exception):
    """The index file can't be used: ``problem`` and ``fix`` for the message."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem} {fix}")
        self.problem, self.fix = problem, fix


def knowledge_path() -> Path:
    """``<data dir>/knowledge.sqlite3``."""
    return paths.data_dir() / FILE_NAME


def connect(db_path: Path) -> sqlite3.Connection:
    """A connection to the index at ``db_path`` (created 0600 with its schema if new), in autocommit mode: each
    write says where its transaction begins and ends."""
    paths.private_dir(db_path.parent)
    if not db_path.exists():
        with open(db_path, "ab", opener=paths.private_opener):
            pass
    paths.make_private(db_path)
    try:
        db = sqlite3.connect(db_path, timeout=10, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA synchronous=NORMAL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            db.close()
            raise KnowledgeUnavailable(f"{db_path} was written by a newer Nalar (schema {version}).",
                                       "Update Nalar, or remove that file to index the collections again.")
        if version < SCHEMA_VERSION:
            db.execute("BEGIN IMMEDIATE")
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise KnowledgeUnavailable(f"the knowledge index {db_path} can't be opened ({exc}).",
                                   "Remove that file and add the collections again, or "
                                   "free the disk it is on.") from exc
    for suffix in ("-wal", "-shm"):
        paths.make_private(db_path.with_name(db_path.name + suffix))
    return db
