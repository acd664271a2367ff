"""Files in a question: what the model reads of each (its text, never a path), or why a file can't be read.

A turn keeps the text itself, so a reload, a branch or an export sees what the model saw, even once the
file has moved or changed. PDFs are read with pypdf in a child process, within a deadline and page and character
caps (app/core/chat/pdf_text.py), so ``read_file`` only reads their bytes and ``read_pdf`` their text, off the GUI
thread; a PDF without a text layer (a scan) is refused.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path

from app.core.chat.pdf_text import Cancellation, PdfUnread, pdf_text

MAX_FILE_BYTES = 32 * 1024 * 1024  # larger files are never read whole into the window
SNIFF_BYTES = 8192
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


@dataclass(frozen=True)
class Attachment:
    name: str  # the file's name, as the model and the reader see it
    size_bytes: int
    text: str  # what the model reads
    kind: str  # "text" or "pdf"
    pages: int = 0  # a PDF's pages
    note: str = ""  # what of it was left out, and why (a PDF past a cap); empty when the model reads it whole


@dataclass(frozen=True)
class PdfFile:
    """A PDF's bytes, its text not read yet: ``read_pdf`` reads it, for seconds at worst, so never on the GUI thread."""

    name: str
    data: bytes


class AttachmentError(ValueError):
    """A file the model can't read, with the cause and what to do."""

    def __init__(self, name: str, problem: str, fix: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name, self.problem, self.fix = name, problem, fix


def _decoded(name: str, data: bytes) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding)
    if b"\x00" in data[:SNIFF_BYTES]:
        raise AttachmentError(name, "this is a binary file, not text",
                              "Attach text, code, Markdown, CSV or PDF files; for an image, use a vision model.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AttachmentError(name, f"this is not UTF-8 text (byte {exc.start} can't be decoded)",
                              "Save it as UTF-8 and attach it again.") from exc


def read_pdf(pdf: PdfFile, cancellation: Cancellation | None = None) -> Attachment:
    """The PDF's text, page by page, or an AttachmentError naming why not (any error of pypdf's included).
    Blocks up to PDF_SECONDS; ``cancellation`` ends it sooner (raising pdf_text.Cancelled)."""
    name = pdf.name
    try:
        read = pdf_text(pdf.data, cancellation)
    except PdfUnread as exc:
        raise AttachmentError(name, exc.problem, exc.fix) from exc
    except OSError as exc:  # no child process could start
        raise AttachmentError(name, f"this PDF can't be read here ({exc.strerror or exc})",
                              "Attach its text instead.") from exc
    pages = [page.strip() for page in read.pages]
    if not any(pages):
        raise AttachmentError(name, f"this PDF has no text layer ({len(pages)} page(s) of images: a scan?)",
                              "Run it through OCR first, or attach a PDF with selectable text.")
    text = "\n\n".join(f"[page {number}]\n{page}" for number, page in enumerate(pages, 1) if page)
    if read.cut:  # the model is told too, so it doesn't answer as if it had read the whole file
        text += f"\n\n[The rest of {name} was not read: {read.cut}.]"
    return Attachment(name, len(pdf.data), text, "pdf", read.page_count, read.cut)


def read_file(path: Path) -> Attachment | PdfFile:
    """The text of ``path`` for the model, or a PDF's bytes for ``read_pdf``, or an AttachmentError naming why not."""
    name = path.name
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise AttachmentError(name, f"the file is {size / 2**20:.0f} MiB, over the {MAX_FILE_BYTES >> 20} MiB "
                                  "Nalar reads", "Attach the part that matters, or a shorter export of it.")
        with path.open("rb") as file:
            head = file.read(5)
        if head == b"%PDF-":
            return PdfFile(name, path.read_bytes())
        return Attachment(name, size, _decoded(name, path.read_bytes()), "text")
    except OSError as exc:
        raise AttachmentError(name, f"the file can't be read ({exc.strerror or exc})",
                              "Check that it exists and that you may read it.") from exc


def read_attachment(path: Path, cancellation: Cancellation | None = None) -> Attachment:
    """``read_file`` and, for a PDF, ``read_pdf``: blocks for as long as a PDF takes."""
    read = read_file(path)
    return read_pdf(read, cancellation) if isinstance(read, PdfFile) else read


def question_with_files(question: str, attachments: list[Attachment]) -> str:
    """The user turn the model reads: each file's text in a block named for it, then the question."""
    blocks = [f'<file name="{a.name}">\n{a.text.rstrip()}\n</file>' for a in attachments]
    return "\n\n".join([*blocks, question]) if blocks else question
