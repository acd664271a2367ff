"""Sync after an edit, a delete, nothing changed, a cancel, a file changing while read, and a real kill mid-index."""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import psutil
import pytest

from app.core.knowledge import sync as sync_module
from app.core.knowledge.db import knowledge_path
from app.core.knowledge.passages import pieces
from app.core.knowledge.reader import Document
from app.core.knowledge.store import KnowledgeStore
from app.core.knowledge.sync import SyncProgress, sync_collection
from tests.core.knowledge.corpus import sync_killed_at, write_corpus
from tests.support.pdfs import shared_stream_pdf

ROOT = Path(__file__).resolve().parents[3]


def passage_ids(path: Path) -> list[int]:
    with closing(sqlite3.connect(knowledge_path())) as db:
        return [row[0] for row in db.execute("SELECT p.id FROM passages p JOIN files f ON f.id = p.file_id "
                                             "WHERE f.path = ? ORDER BY p.id", (str(path),))]


def test_an_edit_is_read_again_and_nothing_else_is(docs: Path, store: KnowledgeStore) -> None:
    """Catches a sync that reads every file each time (slow on a real folder) or one that misses an edit that kept
    the size (mtime must count too), and old passages of an edited file left searchable."""
    write_corpus(docs)
    store.add("notes", [docs])
    sync_collection(knowledge_path(), "notes")
    untouched = passage_ids(docs / "coffee.txt")
    kettle = docs / "kettle.md"
    kettle.write_text(kettle.read_text().replace("vinegar", "citrics"))  # same size, new mtime
    os.utime(kettle, ns=(kettle.stat().st_atime_ns, kettle.stat().st_mtime_ns + 1_000_000_000))
    result = sync_collection(knowledge_path(), "notes")
    assert (result.read, result.unchanged, result.removed) == (1, 29, 0), result
    assert passage_ids(docs / "coffee.txt") == untouched, "an unchanged file was indexed again"
    assert store.search("notes", "citrics")[0].path == kettle
    assert store.search("notes", "vinegar") == [], "the edited file's old passages are still searchable"


def test_a_deleted_file_and_a_deleted_folder_leave_the_index(docs: Path, store: KnowledgeStore) -> None:
    """Catches passages of deleted files staying in the prompt (answers citing a file that is gone)."""
    write_corpus(docs)
    (docs / "sub").mkdir()
    (docs / "sub" / "deep.md").write_text("Narwhal tusks are teeth.")
    store.add("notes", [docs])
    sync_collection(knowledge_path(), "notes")
    (docs / "tides.md").unlink()
    (docs / "sub" / "deep.md").unlink()
    (docs / "sub").rmdir()
    result = sync_collection(knowledge_path(), "notes")
    assert result.removed == 2 and result.read == 0, result
    assert store.search("notes", "tides moon") == [] or all(p.path.name != "tides.md"
                                                              for p in store.search("notes", "tides moon"))
    assert store.search("notes", "narwhal") == []
    assert store.collection("notes").files == 29


def test_nothing_changed_reads_nothing(docs: Path, store: KnowledgeStore) -> None:
    """Catches a no-change sync that opens files (its time grows with the folder) or rewrites passages."""
    write_corpus(docs)
    (docs / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    (docs / "junk.txt").write_bytes(b"abc\x00def")
    store.add("notes", [docs])
    first = sync_collection(knowledge_path(), "notes")
    before = passage_ids(docs / "bees.md")

    def refuse(path: Path, cancelled: object = None) -> Document:
        raise AssertionError(f"{path} was read though nothing changed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sync_module, "read_document", refuse)
        again = sync_collection(knowledge_path(), "notes")
    assert (again.read, again.unchanged, again.removed) == (0, 31, 0), again
    assert {s.path.name for s in again.skipped} == {s.path.name for s in first.skipped} == {"photo.png", "junk.txt"}
    assert passage_ids(docs / "bees.md") == before


def test_a_cancelled_sync_stops_between_files_and_the_next_finishes(docs: Path, store: KnowledgeStore) -> None:
    """Catches a Cancel that is only checked at the end (the window's Cancel doing nothing for minutes), and a
    cancelled sync that marks the collection synced or leaves half a file."""
    questions = write_corpus(docs)
    store.add("notes", [docs])
    seen: list[SyncProgress] = []
    result = sync_collection(knowledge_path(), "notes", on_progress=seen.append, cancelled=lambda: len(seen) >= 5)
    assert result.cancelled and result.read == 5, result
    assert store.collection("notes").synced_at is None
    rest = sync_collection(knowledge_path(), "notes")
    assert (rest.read, rest.unchanged, rest.cancelled) == (25, 5, False), rest
    total = sum(len(pieces((docs / name).read_text())) for name in questions.values())
    assert store.collection("notes").passages == total


def test_a_long_file_is_cancelled_inside_and_rolled_back(docs: Path, store: KnowledgeStore,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a Cancel that waits for a long file's thousands of passages, or one that leaves them half-written."""
    long = docs / "long.txt"
    long.write_text("\n\n".join(f"paragraph {n} " + "words " * 200 for n in range(2000)))
    store.add("notes", [docs])
    monkeypatch.setattr(sync_module, "CANCEL_EVERY", 100)
    checks = iter(range(10**6))
    result = sync_collection(knowledge_path(), "notes", cancelled=lambda: next(checks) >= 3)
    assert result.cancelled and result.read == 0
    assert passage_ids(long) == [], "a cancelled file's passages were kept"


def test_a_file_that_changes_while_read_is_read_again_then_left_with_its_reason(
        docs: Path, store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches passages indexed from a half-written file (a log being appended, a save in progress) recorded as
    up to date, so the finished file is never read."""
    write_corpus(docs)
    grows, settles = docs / "grows.log", docs / "settles.log"
    grows.write_text("first line\n")
    settles.write_text("first line\n")
    real = sync_module.read_document
    writes = {grows: 99, settles: 1}  # how many reads see the file change under them

    def read_while_written(path: Path, cancelled: object) -> Document:
        document = real(path, lambda: False)
        if writes.get(path, 0) > 0:
            writes[path] -= 1
            with path.open("a") as file:  # a real write, between the read and the check after it
                file.write("zanzibar line\n")
        return document

    monkeypatch.setattr(sync_module, "read_document", read_while_written)
    result = sync_collection(knowledge_path(), "notes") if store.add("notes", [docs]) else None
    assert result is not None and result.read == 31, result
    assert [(f.path, f.reason) for f in result.failed] == [
        (grows, "it changed while being read, twice: it is read again next sync")]
    assert len(store.search("notes", "zanzibar")) == 1, "the file that settled was indexed as read the 2nd time"
    writes[grows] = 0
    again = sync_collection(knowledge_path(), "notes")
    assert again.read == 1 and not again.failed, again


def test_a_sync_killed_mid_index_is_finished_by_the_next_and_nothing_is_indexed_twice(
        docs: Path, store: KnowledgeStore) -> None:
    """Catches passages written apart from their file's size and mtime (a kill leaves a file marked done with
    half its passages, or passages without their file, indexed a second time by the next run). The kill is a
    real SIGKILL of a real `nalar knowledge sync` child, mid-run."""
    files = 1500
    for n in range(files):
        (docs / f"note{n:04}.md").write_text(f"Note {n}.\n\n" + f"Topic {n} words and more words.\n" * 60)
    expected = files * len(pieces((docs / "note0000.md").read_text()))
    store.add("notes", [docs])
    sync_killed_at("notes", "[50/", timeout=60)  # mid-index
    with closing(sqlite3.connect(knowledge_path())) as db:
        done = db.execute("SELECT count(*) FROM files").fetchone()[0]
        orphans = db.execute("SELECT count(*) FROM passages WHERE file_id NOT IN (SELECT id FROM files)").fetchone()
    assert 49 <= done < files, f"the kill was not mid-index: {done} of {files} files were indexed"
    assert orphans == (0,)
    assert store.collection("notes").passages == done * (expected // files), "a file was left half-indexed"
    result = sync_collection(knowledge_path(), "notes")
    assert (result.read, result.unchanged) == (files - done, done), result
    collection = store.collection("notes")
    assert (collection.files, collection.passages) == (files, expected)
    with closing(sqlite3.connect(knowledge_path())) as db:
        fts = db.execute("SELECT count(*) FROM passage_search WHERE passage_search MATCH 'topic'").fetchone()[0]
    assert fts == expected, "the full-text index holds passages twice or misses some"


def test_cancel_ends_a_pdf_being_read_and_its_reader(docs: Path, store: KnowledgeStore) -> None:
    """Catches a Cancel that waits for a slow PDF's reader (up to its 20 s deadline) or leaves the pypdf child
    running: the PDF is read once its progress is reported, and Cancel is pressed then."""
    shared_stream_pdf(docs / "slow.pdf")
    store.add("notes", [docs])
    pressed: list[SyncProgress] = []
    result = sync_collection(knowledge_path(), "notes", on_progress=lambda p: pressed.append(p) if p.current else None,
                             cancelled=lambda: bool(pressed))
    assert result.cancelled and result.read == 0, "the PDF was read to the end before Cancel was seen"
    assert passage_ids(docs / "slow.pdf") == []
    readers = [child for child in psutil.Process().children(recursive=True)
               if "app.core.chat.pdf_text" in " ".join(child.cmdline())]
    assert readers == [], f"the PDF's reader is still running: {readers}"


def test_two_syncs_at_once_and_searches_meanwhile_index_each_file_once(docs: Path, store: KnowledgeStore) -> None:
    """Catches "database is locked" for a search while the window indexes (the GUI thread's search must read
    during the worker's writes), and a file indexed twice when `nalar knowledge sync` runs beside the window's."""
    for n in range(300):
        (docs / f"note{n:03}.md").write_text(f"Note {n}.\n\n" + f"Topic {n} words and more words.\n" * 60)
    store.add("notes", [docs])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sync_collection(knowledge_path(), "notes")
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(2)]
    for worker in workers:
        worker.start()
    searches = 0
    while any(worker.is_alive() for worker in workers):
        store.search("notes", "topic words")
        searches += 1
    for worker in workers:
        worker.join()
    assert not errors, errors
    expected = 300 * len(pieces((docs / "note000.md").read_text()))
    collection = store.collection("notes")
    assert (collection.files, collection.passages) == (300, expected)
    with closing(sqlite3.connect(knowledge_path())) as db:
        assert db.execute("SELECT count(*) FROM passage_search WHERE passage_search MATCH 'topic'").fetchone() == (
            expected,)
    assert searches > 0
