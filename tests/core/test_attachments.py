"""Files in a question: the model reads each file's text; a file it can't read is refused with the cause."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from app.core.chat import attachments
from app.core.chat.attachments import AttachmentError, question_with_files, read_attachment
from tests.support.pdfs import blank_pdf, text_pdf


def test_text_code_and_utf16_files_are_read_as_text(tmp_path: Path) -> None:
    """Bugs caught: a UTF-16 file (Windows Notepad's "Unicode") refused as binary; a BOM left in the text."""
    code = tmp_path / "solve.py"
    code.write_text("def solve():\n    return 42  # ✓\n", encoding="utf-8")
    notes = tmp_path / "notes.txt"
    notes.write_bytes(codecs.BOM_UTF16_LE + "Größe: 3 m".encode("utf-16-le"))
    assert read_attachment(code).text == "def solve():\n    return 42  # ✓\n"
    assert read_attachment(notes).text == "Größe: 3 m"
    assert read_attachment(code).size_bytes == code.stat().st_size


def test_a_pdf_is_read_page_by_page(tmp_path: Path) -> None:
    """Bug caught: a PDF attached as bytes (or refused as binary) instead of its text."""
    pdf = text_pdf(tmp_path / "paper.pdf", ["The integral equals one.", "Appendix (proof)."])
    attached = read_attachment(pdf)
    assert (attached.kind, attached.pages) == ("pdf", 2)
    assert "The integral equals one." in attached.text and "Appendix (proof)." in attached.text
    assert attached.text.index("[page 1]") < attached.text.index("[page 2]")


@pytest.mark.parametrize(("make", "problem"), [
    (lambda d: blank_pdf(d / "scan.pdf"), "no text layer"),
    (lambda d: (d / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR") and d / "photo.png", "binary"),
    (lambda d: (d / "latin1.csv").write_bytes("prix;€\n".encode("cp1252")) and d / "latin1.csv", "not UTF-8"),
    (lambda d: (d / "broken.pdf").write_bytes(b"%PDF-1.7\nthis is no pdf") and d / "broken.pdf", "can't be read"),
    (lambda d: d / "missing.txt", "can't be read"),
])
def test_unreadable_files_are_refused_with_the_cause_and_a_fix(tmp_path: Path, make, problem: str) -> None:
    """Bugs caught: a scan sent as an empty file; binary or mis-encoded bytes sent as mojibake; a broken PDF
    or a missing file raising past the window."""
    with pytest.raises(AttachmentError) as refused:
        read_attachment(make(tmp_path))
    assert problem in refused.value.problem and refused.value.fix


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: a multi-GB log read whole into the window's memory."""
    monkeypatch.setattr(attachments, "MAX_FILE_BYTES", 1024)
    big = tmp_path / "big.log"
    big.write_text("x" * 2048)
    with pytest.raises(AttachmentError, match="over the"):
        read_attachment(big)


def test_the_question_carries_each_files_text_by_name() -> None:
    """Bug caught: the model read a path (useless after a move) rather than the text."""
    files = [attachments.Attachment("a.md", 3, "# A\n", "text"), attachments.Attachment("b.csv", 4, "x,y", "text")]
    assert question_with_files("Compare them.", files) == (
        '<file name="a.md">\n# A\n</file>\n\n<file name="b.csv">\nx,y\n</file>\n\nCompare them.')
    assert question_with_files("Just this.", []) == "Just this."
