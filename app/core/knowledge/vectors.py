"""Passages' vectors in the index: written by a sync for the passages that have none for the current model,
read by a hybrid search.

Each batch of EMBED_EVERY passages is embedded, then written in one transaction, so a sync killed mid-embed keeps
every batch it finished and the next sync embeds only the rest; ``(passage_id, model)`` is the table's key, so no
passage ever holds two vectors of one model. A passage deleted or re-indexed meanwhile (a second sync) gets no
vector: one is written only while its passage still holds the text that was embedded.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from app.core.knowledge.embedder import Embedder, EmbedderBroken

if TYPE_CHECKING:
    import numpy.typing as npt

EMBED_EVERY = 32  # passages embedded and written per transaction (2-3 s on 2 cores); Cancel is checked between them


@dataclass(frozen=True)
class Embedded:
    count: int  # vectors written by this sync
    cancelled: bool = False
    problem: str = ""  # the model could not be loaded or run: the text index is kept, ranking stays BM25


def embed_missing(db: sqlite3.Connection, name: str, embedder: Embedder, report: Callable[[int, int], None],
                  cancelled: Callable[[], bool]) -> Embedded:
    """Vectors for collection ``name``'s passages that have none for ``embedder.model_id``; its vectors of other
    models (an older or another model) are dropped first. ``report(done, total)`` before each batch and at the end."""
    model = embedder.model_id
    mine = "SELECT p.id FROM passages p JOIN files f ON f.id = p.file_id WHERE f.collection = ?"
    db.execute("BEGIN IMMEDIATE")
    db.execute(f"DELETE FROM vectors WHERE model != ? AND passage_id IN ({mine})", (model, name))
    db.execute("COMMIT")
    todo = [row[0] for row in db.execute(
        f"{mine} AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.passage_id = p.id AND v.model = ?) ORDER BY p.id",
        (name, model))]
    done = 0
    for start in range(0, len(todo), EMBED_EVERY):
        if cancelled():
            return Embedded(done, cancelled=True)
        report(done, len(todo))
        ids = todo[start:start + EMBED_EVERY]
        marks = ", ".join("?" * len(ids))
        rows = db.execute(f"SELECT id, text FROM passages WHERE id IN ({marks}) ORDER BY id", ids).fetchall()
        try:
            matrix = embedder.embed([text for _id, text in rows])
        except EmbedderBroken as broken:
            return Embedded(done, problem=str(broken))
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR IGNORE INTO vectors (passage_id, model, vector) SELECT ?, ?, ? "
                           "WHERE EXISTS (SELECT 1 FROM passages WHERE id = ? AND text = ?)",
                           [(pid, model, vector.tobytes(), pid, text) for (pid, text), vector in zip(rows, matrix)])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        done += len(ids)
    report(done, len(todo))
    return Embedded(done)


def load_vectors(db: sqlite3.Connection, names: list[str],
                 model: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The passage ids and a (n, dim) matrix of the collections' vectors of ``model`` (empty when there are none)."""
    marks = ", ".join("?" * len(names))
    rows = db.execute(f"SELECT v.passage_id, v.vector FROM vectors v JOIN passages p ON p.id = v.passage_id "
                      f"JOIN files f ON f.id = p.file_id WHERE v.model = ? AND f.collection IN ({marks}) "
                      "ORDER BY v.passage_id", (model, *names)).fetchall()
    if not rows:
        return np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
    ids = np.fromiter((row[0] for row in rows), np.int64, len(rows))
    matrix = np.frombuffer(b"".join(row[1] for row in rows), np.float32).reshape(len(rows), -1)
    return ids, matrix
