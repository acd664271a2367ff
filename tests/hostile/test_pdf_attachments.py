"""Hostile PDFs as attachments (app/core/chat/pdf_text.py, attachments.py, and the bar in app/ui/chat/
attachments_bar.py), each built here with pypdf itself (tests/support/pdfs.py): 2,000 pages sharing one content
stream, a decompression bomb pypdf refuses with LimitReachedError, a truncated file and a garbled one.

Each cap is checked by what was read (pages, characters), never by how long it took; the deadline is checked at
zero seconds, where no page can come back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from PySide6.QtWidgets import QPushButton, QWidget

from app.core.chat import pdf_text
from app.core.chat.attachments import AttachmentError, read_attachment
from app.ui.chat.attachments_bar import AttachmentsBar
from tests.support.pdfs import bomb_pdf, garbled_pdf, shared_stream_pdf, text_pdf, truncated_pdf
from tests.support.processes import gone

GUARD_MS = 60_000  # hang guards only: each wait ends on its condition long before


def pdf_readers() -> list[psutil.Process]:
    """This process's PDF-reading children still alive (zombies are ended)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "app.core.chat.pdf_text" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def test_a_2000_page_pdf_sharing_one_stream_is_read_only_to_the_character_cap(tmp_path: Path) -> None:
    """Bug caught: a 330 KB PDF whose 2,000 pages share one content stream (89,000 characters a page) was read
    page after page, over a minute of pypdf on the GUI thread, into 178 million characters. Now the reading
    stops at PDF_MAX_CHARS, counted, and the model and the user are told what was left out."""
    pdf = shared_stream_pdf(tmp_path / "shared.pdf")
    attached = read_attachment(pdf)
    assert attached.pages == 2000
    body = attached.text[:attached.text.index("\n\n[The rest of shared.pdf was not read")]
    pages = [page.split("\n", 1)[1] for page in body.split("\n\n")]  # each "[page n]\n" and its text
    assert 1 < len(pages) < 20, "pages up to the cap, of 2,000"
    assert sum(map(len, pages)) == pdf_text.PDF_MAX_CHARS, "every character up to the cap, none past it"
    assert len(set(map(len, pages[:-1]))) == 1 and len(pages[-1]) < len(pages[0]), "the last page cut to fit"
    assert f"only its first {pdf_text.PDF_MAX_CHARS:,} characters were read" in attached.note
    assert attached.note in attached.text, "the model is told its text was cut"


def test_a_2000_page_pdf_is_read_only_to_the_page_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: every page of a 2,000-page PDF extracted, however little text each holds. Now the reading stops
    after PDF_MAX_PAGES pages (25 here, to keep the test short), counted."""
    monkeypatch.setattr(pdf_text, "PDF_MAX_PAGES", 25)
    attached = read_attachment(shared_stream_pdf(tmp_path / "pages.pdf", lines=1))
    assert attached.text.count("[page ") == 25 and attached.pages == 2000
    assert attached.note == "only its first 25 of 2,000 pages were read"


def test_a_pdf_past_its_deadline_is_refused_and_its_reader_ended(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: no time bound on a PDF's reading. At a deadline of 0 s no page comes back: the PDF is refused
    saying so, and the child reading it is ended, not left running."""
    monkeypatch.setattr(pdf_text, "PDF_SECONDS", 0.0)
    with pytest.raises(AttachmentError, match="took more than 0 s"):
        read_attachment(shared_stream_pdf(tmp_path / "slow.pdf"))
    assert pdf_readers() == []


@pytest.mark.parametrize(("make", "cause"), [
    (bomb_pdf, "LimitReachedError"),
    (truncated_pdf, "PdfStreamError"),
    (garbled_pdf, "PdfStreamError"),
], ids=["decompression-bomb", "truncated", "garbled"])
def test_a_pdf_pypdf_cannot_read_is_refused_with_pypdfs_reason(tmp_path: Path, make: Callable[[Path], Path],
                                                                cause: str) -> None:
    """Bug caught: pypdf's LimitReachedError (a stream inflating past its 75 MB limit) is no PdfReadError, so it
    escaped the reader; any other error type pypdf raises on a damaged file would too. Each is a refusal now."""
    with pytest.raises(AttachmentError) as refused:
        read_attachment(make(tmp_path / "hostile.pdf"))
    assert refused.value.name == "hostile.pdf" and cause in refused.value.problem and refused.value.fix


def test_a_drop_with_a_bomb_a_truncated_and_a_garbled_pdf_names_each_and_attaches_the_rest(qtbot,
                                                                                           tmp_path: Path) -> None:
    """Bug caught: pypdf's LimitReachedError escaped ``AttachmentsBar.add_paths``: no banner, and the files dropped
    after the bomb were never attached. Now each hostile PDF is a banner naming it, and the rest are attached."""
    bar = AttachmentsBar()
    qtbot.addWidget(bar)
    refusals: list[str] = []
    bar.refused.connect(lambda problem, fix: refusals.append(problem))
    notes = tmp_path / "notes.txt"
    notes.write_text("Read me too.\n")
    hostile = [bomb_pdf(tmp_path / "bomb.pdf"), truncated_pdf(tmp_path / "cut.pdf"),
               garbled_pdf(tmp_path / "noise.pdf")]
    good = text_pdf(tmp_path / "paper.pdf", ["The integral equals one."])
    try:
        bar.add_paths([hostile[0], notes, *hostile[1:], good])
        assert [a.name for a in bar.attachments] == ["notes.txt"], "text at once; the PDFs are read off the GUI thread"
        qtbot.waitUntil(lambda: bar.pdfs.reading is None and not bar.pdfs.waiting, timeout=GUARD_MS)
    finally:
        bar.pdfs.cancel()
    assert [a.name for a in bar.attachments] == ["notes.txt", "paper.pdf"]
    assert [problem.split(" was not attached: ")[0] for problem in refusals] == ["bomb.pdf", "cut.pdf", "noise.pdf"]
    assert "LimitReachedError" in refusals[0]


def test_a_2000_page_pdf_is_read_off_the_gui_thread_and_cancel_ends_its_reader(qtbot, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: ``add_paths`` read a PDF on the GUI thread, so 2,000 pages sharing one stream froze the window for
    over a minute, with nothing to stop it. Here the caps are lifted so the reading would take minutes: the bar
    returns at once showing it, and Cancel ends the child reading it, attaching nothing and blaming nothing."""
    monkeypatch.setattr(pdf_text, "PDF_MAX_CHARS", 10**12)
    monkeypatch.setattr(pdf_text, "PDF_MAX_PAGES", 10**6)
    monkeypatch.setattr(pdf_text, "PDF_SECONDS", 3600.0)
    bar = AttachmentsBar()
    qtbot.addWidget(bar)
    refusals: list[str] = []
    bar.refused.connect(lambda problem, fix: refusals.append(problem))
    try:
        bar.add_paths([shared_stream_pdf(tmp_path / "shared.pdf")])
        assert bar.attachments == [] and bar.pdfs.reading is not None
        chip = bar.findChild(QWidget, "ReadingChip")
        assert chip is not None and "Reading shared.pdf" in " ".join(
            label.text() for label in chip.findChildren(QWidget) if hasattr(label, "text"))
        qtbot.waitUntil(lambda: bar.pdfs.pid is not None, timeout=GUARD_MS)
        reader, operation = bar.pdfs.pid, bar.pdfs._operation
        assert reader is not None and operation is not None and not gone(reader, 0)
        cancel = bar.findChild(QPushButton, "CancelReading")  # the chip is drawn again as the reading goes on
        assert cancel is not None
        cancel.click()
        assert gone(reader, GUARD_MS / 1000), "Cancel ended the child reading the PDF"
        assert operation.wait(GUARD_MS / 1000), "and the runner's worker"
        qtbot.waitUntil(lambda: bar.findChild(QWidget, "ReadingChip") is None, timeout=GUARD_MS)
    finally:
        bar.pdfs.cancel()
    assert bar.attachments == [] and refusals == [] and pdf_readers() == []
