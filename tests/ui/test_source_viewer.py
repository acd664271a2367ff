"""A citation's viewer (issue 51 item 3) over real files the tests write: the file itself at the cited lines or PDF
page, highlighted and scrolled there, as plain text; the saved passage with the reason where the file is refused,
gone or changed since it was indexed; a huge file read only around the passage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QGuiApplication

from app.core.chat.conversation import Source
from app.core.knowledge.excerpt import WINDOW_BYTES, WINDOW_LINES
from app.core.knowledge.passages import pieces
from app.core.knowledge.reader import read_document
from app.ui.knowledge.viewer import SourceViewer
from tests.support.pdfs import text_pdf


def viewer_of(qtbot, source: Source, folder: Path) -> SourceViewer:
    viewer = SourceViewer(1, source, lambda name: (folder,) if name == "notes" else ())
    qtbot.addWidget(viewer)
    viewer.open()
    qtbot.waitUntil(lambda: viewer.settled, timeout=20_000)
    return viewer


def visible_blocks(viewer: SourceViewer) -> range:
    view = viewer.file_view
    top = view.cursorForPosition(QPoint(0, 0)).blockNumber()
    bottom = view.cursorForPosition(QPoint(0, view.viewport().height() - 1)).blockNumber()
    return range(top, bottom + 1)


def markdown_notes(folder: Path) -> tuple[Path, list[str]]:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"Line {n} of the notes, about topic {n}." for n in range(1, 301)]
    lines[41] = "<b>x</b>"  # line 42: markup in a file is text
    path = folder / "notes.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


def test_a_citation_of_lines_40_to_45_shows_the_file_there_highlighted_as_plain_text(qtbot, tmp_path: Path) -> None:
    """Bugs caught: the viewer showing the passage alone, not the file; the view left at the top (line 40 out of
    sight); the wrong lines marked (off by one); the file's text taken as markup; Copy path:line without the line."""
    path, lines = markdown_notes(tmp_path / "notes")
    passage = "\n".join(lines[39:45])
    viewer = viewer_of(qtbot, Source("notes", str(path), None, 40, 45, passage), tmp_path / "notes")
    assert viewer.file_view.isVisible() and not viewer.passage.isVisible(), viewer.note.text()
    assert viewer.file_view.toPlainText() == "\n".join(lines), "the viewer doesn't show the file's own text"
    assert "<b>x</b>" in viewer.file_view.document().findBlockByNumber(41).text()
    assert viewer.note.text() == "showing lines 1–300 of 300"
    assert viewer.file_view.textCursor().selectedText().replace("\u2029", "\n") == passage
    marks = viewer.file_view.extraSelections()
    assert len(marks) == 1 and marks[0].cursor.selectedText().replace("\u2029", "\n") == passage
    shown = visible_blocks(viewer)
    assert 39 in shown and 44 in shown and 0 not in shown, f"lines {shown.start + 1}-{shown.stop} shown"
    viewer.copy_button.click()
    assert QGuiApplication.clipboard().text() == f"{path}:40"


def test_a_pdf_citation_shows_its_page_of_the_pdf(qtbot, tmp_path: Path) -> None:
    """Bugs caught: the first page (or the whole PDF) shown instead of the cited one; the page count missing; the
    passage not marked on its page."""
    folder = tmp_path / "notes"
    folder.mkdir()
    path = text_pdf(folder / "paper.pdf", [f"Page {n} is about topic number {n} of the paper." for n in range(1, 6)])
    passage = pieces(read_document(path).pages[2])[0].text  # as the index cut it
    viewer = viewer_of(qtbot, Source("notes", str(path), 3, None, None, passage), folder)
    assert "page 3 of 5" in viewer.note.text(), viewer.note.text()
    shown = viewer.file_view.toPlainText()
    assert "topic number 3" in shown and "topic number 2" not in shown and "topic number 4" not in shown, shown
    assert "topic number 3" in viewer.file_view.textCursor().selectedText() and not viewer.passage.isVisible()
    viewer.copy_button.click()
    assert QGuiApplication.clipboard().text() == f"{path}#page=3"


def test_a_file_edited_after_indexing_says_so_and_shows_the_saved_passage(qtbot, tmp_path: Path) -> None:
    """Bugs caught: other lines highlighted as if they were the passage; the saved passage hidden."""
    path, lines = markdown_notes(tmp_path / "notes")
    passage = "\n".join(lines[39:45])
    path.write_text("A new first paragraph.\n\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    viewer = viewer_of(qtbot, Source("notes", str(path), None, 40, 45, passage), tmp_path / "notes")
    assert "changed since it was indexed" in viewer.note.text(), viewer.note.text()
    assert viewer.passage.isVisible() and viewer.passage.toPlainText() == passage
    assert viewer.file_view.extraSelections() == [] and "A new first paragraph." in viewer.file_view.toPlainText()


@pytest.mark.parametrize("case", ["outside", "symlink-out", "gone"])
def test_a_file_outside_the_folders_or_gone_is_refused_with_its_reason_and_the_passage(
        qtbot, tmp_path: Path, case: str) -> None:
    """Bugs caught: a file outside the collection read into the viewer (a forged or imported history naming
    ~/.ssh/id_rsa, or a link in the folder pointing there); a gone file failing without a word."""
    folder = tmp_path / "notes"
    folder.mkdir()
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("the secret\n" * 50, encoding="utf-8")
    path = {"outside": secret, "symlink-out": folder / "link.txt", "gone": folder / "gone.txt"}[case]
    if case == "symlink-out":
        path.symlink_to(secret)
    viewer = viewer_of(qtbot, Source("notes", str(path), None, 1, 2, "the saved passage"), folder)
    reason = "can't be found now" if case == "gone" else "outside the folders of 'notes'"
    assert reason in viewer.note.text(), viewer.note.text()
    assert viewer.reading is None and viewer.excerpt is None, "a refused file was read"
    assert viewer.passage.isVisible() and viewer.passage.toPlainText() == "the saved passage"
    assert not viewer.file_view.isVisible() and "secret" not in viewer.file_view.toPlainText()


def test_a_200_mb_file_is_read_only_around_the_cited_line(qtbot, tmp_path: Path) -> None:
    """Bugs caught: a huge file read whole into memory and the window (200 MB on the GUI, or refused as too big
    for the index's reader); the window unbounded in lines."""
    folder = tmp_path / "notes"
    folder.mkdir()
    path = folder / "huge.log"
    lines = [f"event {n}: the pump started" for n in range(1, 31)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.truncate(path, 200 * 2**20)  # sparse: 200 MB on paper, NUL bytes after the text
    viewer = viewer_of(qtbot, Source("notes", str(path), None, 10, 12, "\n".join(lines[9:12])), folder)
    excerpt = viewer.excerpt
    assert excerpt is not None and excerpt.marked == (9, 11), viewer.note.text()
    assert excerpt.bytes_read <= WINDOW_BYTES, f"read {excerpt.bytes_read:,} bytes of a 200 MB file"
    assert "of a 200 MiB file" in viewer.note.text() and viewer.file_view.blockCount() <= WINDOW_LINES
    assert viewer.file_view.textCursor().selectedText().startswith("event 10:")
