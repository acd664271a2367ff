"""PDFs made by the tests with pypdf itself: one with a text layer per page, one of blank pages (as a scan
without OCR reads to a text extractor), and hostile ones: thousands of pages sharing one stream, a decompression
bomb, a truncated file and a garbled one."""

from __future__ import annotations

import zlib
from pathlib import Path

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject, StreamObject

from app.commands.knowledge.corpus import text_pdf as corpus_pdf


def text_pdf(path: Path, pages: list[str]) -> Path:
    """One text layer per page: the PDFs the knowledge bench writes, with each page's text as one line."""
    corpus_pdf(path, [[text] for text in pages])
    return path


def blank_pdf(path: Path, pages: int = 2) -> Path:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    with path.open("wb") as file:
        writer.write(file)
    return path


def _font_resources(writer: PdfWriter) -> DictionaryObject:
    font = writer._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica")}))
    return DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})


def shared_stream_pdf(path: Path, pages: int = 2000, lines: int = 3000) -> Path:
    """``pages`` pages that all draw one content stream of ``lines`` lines of text: with the defaults about 300 KB
    on disk, and each page's text is the whole stream's (~89,000 characters), so a reader that extracts every page
    does 2,000 times the work of one (over a minute)."""
    writer = PdfWriter()
    resources = _font_resources(writer)
    body = b"BT /F1 12 Tf 72 720 Td " + b"".join(b"(line %d of the shared stream) Tj T* " % n for n in range(lines))
    stream = DecodedStreamObject()
    stream.set_data(body + b"ET")
    shared = writer._add_object(stream.flate_encode())
    for _ in range(pages):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = resources
        page[NameObject("/Contents")] = shared
    with path.open("wb") as file:
        writer.write(file)
    return path


def bomb_pdf(path: Path) -> Path:
    """One page whose content stream is 80 MB of spaces deflated to ~80 KB: past pypdf's 75 MB limit, so pypdf
    raises its LimitReachedError."""
    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    page[NameObject("/Resources")] = _font_resources(writer)
    stream = StreamObject()
    stream.set_data(zlib.compress(b" " * 80_000_000, 9))
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    page[NameObject("/Contents")] = writer._add_object(stream)
    with path.open("wb") as file:
        writer.write(file)
    return path


def truncated_pdf(path: Path) -> Path:
    """A text PDF cut in half, as an interrupted download leaves it."""
    whole = text_pdf(path, ["The first page.", "The second page."]).read_bytes()
    path.write_bytes(whole[:len(whole) // 2])
    return path


def garbled_pdf(path: Path) -> Path:
    """A PDF's header, then noise."""
    path.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 16)
    return path
