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
from app.core.safe_files import FileTooLarge, NotRegularFile, read_regular

MAX_FILE_BYTES = 32 * 1024 * 1024  # larger files are refused; at most this + 1 bytes are ever read
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
    """The text, or AttachmentError for any bytes that don't decode (a BOM followed by bad bytes included)."""
    encoding = next((encoding for bom, encoding in _BOMS if data.startswith(bom)), None)
    if encoding is None and b"\x00" in data[:SNIFF_BYTES]:
        raise AttachmentError(name, "this is a binary file, not text",
                              "Attach text, code, Markdown, CSV or PDF files; for an image, use a vision model.")
    label = {"utf-8-sig": "UTF-8", "utf-16": "UTF-16"}.get(encoding or "", "UTF-8")
    try:
        return data.decode(encoding or "utf-8")
    except UnicodeDecodeError as exc:
        raise AttachmentError(name, f"this is not {label} text (byte {exc.start} can't be decoded)",
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


def read_file(path: Path, *, follow_symlinks: bool = True) -> Attachment | PdfFile:
    """The text of ``path`` for the model, or a PDF's bytes for ``read_pdf``, or an AttachmentError naming why not.

    Only a regular file is read, and at most MAX_FILE_BYTES + 1 of it (``read_regular``): a ``notes.txt`` that
    links to /dev/zero or /dev/urandom was read until memory ran out, and a FIFO blocked the window for ever.
    ``follow_symlinks=False`` (a knowledge collection's walk) refuses a link as the last part of ``path``."""
    name = path.name
    try:
        data = read_regular(path, MAX_FILE_BYTES, follow_symlinks=follow_symlinks)
    except FileTooLarge as exc:
        raise AttachmentError(name, f"the file is {exc.size / 2**20:.0f} MiB, over the {MAX_FILE_BYTES >> 20} MiB "
                              "Nalar reads", "Attach the part that matters, or a shorter export of it.") from None
    except NotRegularFile as exc:
        raise AttachmentError(name, f"this is {exc.kind}, not a regular file, so it is not read",
                              "Attach a saved file; for a program's output, save it to a file first.") from None
    except OSError as exc:
        raise AttachmentError(name, f"the file can't be read ({exc.strerror or exc})",
                              "Check that it exists and that you may read it.") from exc
    if data.startswith(b"%PDF-"):
        return PdfFile(name, data)
    return Attachment(name, len(data), _decoded(name, data), "text")


def read_attachment(path: Path, cancellation: Cancellation | None = None) -> Attachment:
    """``read_file`` and, for a PDF, ``read_pdf``: blocks for as long as a PDF takes."""
    read = read_file(path)
    return read_pdf(read, cancellation) if isinstance(read, PdfFile) else read


def question_with_files(question: str, attachments: list[Attachment]) -> str:
    """The user turn the model reads: each file's text in a block named for it, then the question."""
    blocks = [f'<file name="{a.name}">\n{a.text.rstrip()}\n</file>' for a in attachments]
    return "\n\n".join([*blocks, question]) if blocks else question
