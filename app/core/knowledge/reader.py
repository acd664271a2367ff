"""What of a file in a collection is indexed: its text (or a PDF's pages), read by the attachments' own readers,
or the reason it is not.

Which files are read is decided by name first (``indexed_kind``): the kinds attachments read (text, Markdown, code,
PDF); anything else is listed as skipped with its suffix, never opened. What a file holds then decides: a NUL byte
or bytes that don't decode make it "binary", a BOM makes it UTF-16. The reading itself is ``attachments.read_file``
(a regular file only, O_NONBLOCK, at most MAX_FILE_BYTES + 1 bytes, not through a link) and ``pdf_text`` (pypdf in a
child with page and character caps and a deadline), so a PDF bomb or a 2 GB file costs what an attachment costs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.chat.attachments import AttachmentError, PdfFile, read_file
from app.core.chat.pdf_text import Cancellation, Cancelled, PdfUnread, pdf_text

TEXT_SUFFIXES = frozenset(
    ".txt .text .md .markdown .mdx .rst .adoc .org .tex .bib .csv .tsv .log .json .jsonl .yaml .yml .toml .ini .cfg "
    ".conf .xml .html .htm .css .scss .py .pyi .ipynb .c .h .cc .cpp .hpp .cxx .rs .go .java .kt .kts .scala .swift "
    ".m .mm .js .jsx .ts .tsx .mjs .cjs .vue .svelte .rb .php .pl .pm .lua .r .jl .hs .ml .mli .ex .exs .erl .clj "
    ".sh .bash .zsh .fish .ps1 .bat .sql .proto .graphql .gradle .cmake .mk .dart .zig .nim .v .sv .vhd .asm .s "
    ".properties .env.example .gitignore .dockerfile .srt .vtt".split())
TEXT_NAMES = frozenset("readme license licence copying authors changelog changes news todo makefile dockerfile "
                       "containerfile vagrantfile gemfile rakefile procfile".split())


def indexed_kind(name: str) -> str | None:
    """"text", "pdf", or None for a kind a collection doesn't read (an image, an archive, an office file…)."""
    lower = name.lower()
    suffix = os.path.splitext(lower)[1]
    if suffix == ".pdf":
        return "pdf"
    if suffix in TEXT_SUFFIXES or lower in TEXT_NAMES or lower.split(".")[0] in TEXT_NAMES:
        return "text"
    return None


@dataclass(frozen=True)
class Document:
    """A file's text: ``pages`` for a PDF (1-based by position), else one text in ``text``; ``note`` what a PDF cap
    left out."""

    text: str = ""
    pages: tuple[str, ...] = ()
    is_pdf: bool = False
    note: str = ""


class Unreadable(Exception):
    """A file that gives no text; ``reason`` is what the collection's skipped list shows."""

    def __init__(self, reason: str, *, retry: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.retry = reason, retry  # retry: a read error the next sync tries again (not the content)


class ReadCancelled(Exception):
    """The sync was cancelled while this file was read (a PDF's reader is ended at once)."""


def read_document(path: Path, cancelled: Callable[[], bool] = lambda: False) -> Document:
    """The text of ``path`` (not through a symlink), or Unreadable naming why, or ReadCancelled. Blocks up to
    pdf_text.PDF_SECONDS for a PDF; ``cancelled`` is polled meanwhile and ends its reader."""
    try:
        read = read_file(path, follow_symlinks=False)
    except AttachmentError as exc:
        if "binary" in exc.problem:
            raise Unreadable(f"binary file (NUL bytes) named {path.suffix or path.name}") from None
        if "can't be decoded" in exc.problem:
            raise Unreadable(f"binary file named {path.suffix or path.name}: {exc.problem}") from None
        raise Unreadable(exc.problem, retry="can't be read" in exc.problem) from None
    if not isinstance(read, PdfFile):
        if indexed_kind(path.name) == "pdf":
            raise Unreadable("named .pdf but not a PDF (no %PDF- header)")
        return Document(text=read.text)
    if indexed_kind(path.name) != "pdf":
        raise Unreadable(f"a PDF named {path.suffix or path.name}: rename it .pdf to index it")
    return _pdf(read, cancelled)


def _pdf(pdf: PdfFile, cancelled: Callable[[], bool]) -> Document:
    cancellation = Cancellation()
    done = threading.Event()

    def watch() -> None:  # the child is ended as soon as the sync is cancelled, not after its deadline
        while not done.wait(0.05):
            if cancelled():
                cancellation.cancel()
                return

    watcher = threading.Thread(target=watch, daemon=True, name="nalar-knowledge-pdf-cancel")
    watcher.start()
    try:
        read = pdf_text(pdf.data, cancellation)
    except Cancelled:
        raise ReadCancelled from None
    except PdfUnread as exc:
        raise Unreadable(exc.problem) from None
    except OSError as exc:
        raise Unreadable(f"no PDF reader could start ({exc.strerror or exc})") from None
    finally:
        done.set()
        watcher.join()
    if not any(page.strip() for page in read.pages):
        raise Unreadable(f"this PDF has no text layer ({read.page_count} page(s) of images: a scan?)")
    return Document(pages=tuple(read.pages), is_pdf=True, note=read.cut)
