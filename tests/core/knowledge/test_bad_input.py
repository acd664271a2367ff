"""Hostile folders and queries: each bad input skipped or bounded with its reason, never a hang, never a read
outside the folders the user added."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from app.core.knowledge.db import knowledge_path
from app.core.knowledge.reader import Unreadable, read_document
from app.core.knowledge.store import KnowledgeStore
from app.core.knowledge.sync import SyncResult, sync_collection
from tests.support.pdfs import blank_pdf, bomb_pdf, garbled_pdf, text_pdf

DEADLINE_S = 120  # far past what any case takes (a PDF's reader has a 20 s deadline of its own): a hang, not a slow run


def synced(name: str) -> SyncResult:
    """sync_collection on a thread, failing (not hanging the suite) if it doesn't end by DEADLINE_S."""
    results: list[SyncResult] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(sync_collection(knowledge_path(), name))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    assert not worker.is_alive(), f"the sync of {name!r} hung past {DEADLINE_S} s"
    if errors:
        raise errors[0]
    return results[0]


def test_every_hostile_entry_is_skipped_with_its_reason_and_the_rest_indexed(tmp_path: Path, docs: Path,
                                                                              store: KnowledgeStore) -> None:
    """Catches a sync that waits for ever on a FIFO, reads /dev/zero until memory runs out, walks a symlink loop
    until the stack overflows, reads a 2 GB file whole, indexes a binary file's bytes as text, or follows a link
    out of the folders the user added (a link to ~/.ssh indexed and sent to the model)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the private key passphrase")
    (docs / "good.md").write_text("Kettles boil water.")
    (docs / "utf16.txt").write_bytes("Café notes in UTF-16 about lighthouses".encode("utf-16"))
    (docs / "binary.txt").write_bytes(b"text\x00\x01\x02 then bytes")
    (docs / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    with (docs / "huge.txt").open("wb") as file:  # sparse: 2 GiB said, nothing written
        file.truncate(2 << 30)
    os.mkfifo(docs / "pipe.txt")
    (docs / "zero.txt").symlink_to("/dev/zero")
    (docs / "loop_a").symlink_to(docs / "loop_b")
    (docs / "loop_b").symlink_to(docs / "loop_a")
    (docs / "up").symlink_to(docs)  # a folder loop through a link
    (docs / "secret.txt").symlink_to(outside / "secret.txt")
    (docs / "elsewhere").symlink_to(outside)
    (docs / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    store.add("notes", [docs])
    result = synced("notes")
    reasons = {entry.path.name: entry.reason for entry in result.skipped}
    assert reasons == {
        "binary.txt": "binary file (NUL bytes) named .txt",
        "latin1.txt": "binary file named .txt: this is not UTF-8 text (byte 3 can't be decoded)",
        "huge.txt": "the file is 2048 MiB, over the 32 MiB Nalar reads",
        "pipe.txt": "not a regular file: a pipe (FIFO)",
        "zero.txt": "symbolic link leading outside the collection's folders (to /dev/zero)",
        "loop_a": "symbolic link loop", "loop_b": "symbolic link loop",
        "up": "symbolic link to a folder: not followed",
        "secret.txt": f"symbolic link leading outside the collection's folders (to {outside / 'secret.txt'})",
        "elsewhere": f"symbolic link leading outside the collection's folders (to {outside})",
        "image.png": "not a kind Nalar indexes (.png): text, Markdown, code and PDF are",
    }, reasons
    assert (result.read, result.failed) == (2, ()), result
    assert store.search("notes", "lighthouses")[0].path.name == "utf16.txt", "a UTF-16 file (BOM) is text too"
    assert store.search("notes", "passphrase private key") == [], "a file outside the added folder was read"
    assert {entry.path.name for entry in store.skipped("notes")} == set(reasons)


def test_a_file_swapped_for_a_link_after_the_walk_is_not_read(tmp_path: Path) -> None:
    """Catches the reader following a link the walk never saw (a file replaced by a link to /etc/shadow between
    the folder's listing and the read)."""
    link = tmp_path / "notes.txt"
    link.symlink_to("/etc/hostname")
    with pytest.raises(Unreadable, match="can't be read"):
        read_document(link)


def test_pdfs_are_indexed_by_page_and_a_bomb_a_scan_and_a_garbled_one_skipped(docs: Path,
                                                                              store: KnowledgeStore) -> None:
    """Catches PDF passages without their page (a citation can't open the right place), and a PDF bomb, a scan
    or a broken PDF stopping the sync or inflating without a cap (pdf_text's caps and deadline apply)."""
    text_pdf(docs / "manual.pdf", ["Unpacking the printer.", "Replacing the toner cartridge carefully.", "Warranty."])
    bomb_pdf(docs / "bomb.pdf")
    blank_pdf(docs / "scan.pdf")
    garbled_pdf(docs / "garbled.pdf")
    text_pdf(docs / "disguised.txt", ["A PDF named .txt."])
    store.add("notes", [docs])
    result = synced("notes")
    assert result.read == 1, result
    reasons = {entry.path.name: entry.reason for entry in result.skipped}
    assert set(reasons) == {"bomb.pdf", "scan.pdf", "garbled.pdf", "disguised.txt"}, reasons
    assert "LimitReached" in reasons["bomb.pdf"] or "can't be read" in reasons["bomb.pdf"], reasons["bomb.pdf"]
    assert "no text layer" in reasons["scan.pdf"]
    assert reasons["disguised.txt"] == "a PDF named .txt: rename it .pdf to index it"
    [hit] = store.search("notes", "toner cartridges")
    assert (hit.path.name, hit.page, hit.line_start) == ("manual.pdf", 2, None)


HOSTILE_QUERIES = ['"', '""', "'", "*", "a*b*", "NEAR(kettle water, 2)", "kettle OR", "AND", "NOT kettle", "-kettle",
                   "text: kettle", "{text}: kettle", "^kettle", "(kettle", "kettle)", "\x00kettle\x00", "\ud800kettle",
                   "kettle\u200b", "🫖 kettle", "a" * 100_000, " ".join(["kettle"] * 10_000), "", "   ", "\t\n",
                   "rank:bm25", "passage_search", "'); DROP TABLE passages; --"]


@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=range(len(HOSTILE_QUERIES)))
def test_a_hostile_query_never_raises(docs: Path, store: KnowledgeStore, query: str) -> None:
    """Catches a query handed to FTS5 as syntax ("fts5: syntax error near ..." on a quote, NEAR( or a column
    filter; a NUL refused by SQLite; 10,000 words taking seconds) instead of as words."""
    (docs / "kettle.md").write_text("The kettle boils water.")
    store.add("notes", [docs])
    sync_collection(knowledge_path(), "notes")
    found = store.search("notes", query)
    assert isinstance(found, list)
    if "kettle" in query and query.strip() not in ("-kettle",):
        assert found and found[0].path.name == "kettle.md", (query[:40], found)
    assert store.collection("notes").passages == 1, "the query changed the index"
