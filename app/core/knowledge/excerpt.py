"""The place a citation names, read from its file as it is now: the lines around a text passage, or a PDF's page,
with the passage's lines marked, or None marked where the file no longer holds the passage there (it changed since
it was indexed).

A file the index could read (up to attachments.MAX_FILE_BYTES) is read with the index's own reader
(``reader.read_document``), so its lines are numbered as the passage's were and a PDF gets the same bounded pypdf
child. A larger one (it grew since, or is huge) is never read whole: its newlines are counted in chunks up to the
cited line (at most MAX_SCAN_BYTES), then one window of at most WINDOW_BYTES is read from there. Either way the
viewer gets at most WINDOW_LINES lines, each cut at LINE_CHARS, so a minified or NUL-filled file lays out quickly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.core.chat.attachments import MAX_FILE_BYTES
from app.core.chat.conversation import Source
from app.core.knowledge.reader import Unreadable, read_document
from app.core.safe_files import NotRegularFile, opened_regular

CONTEXT_LINES = 200  # lines shown above the passage
WINDOW_LINES = 600  # lines shown in all
LINE_CHARS = 2_000  # a longer line is shown cut (the passage's lines are compared whole)
CHUNK_BYTES = 1 << 20
MAX_SCAN_BYTES = MAX_FILE_BYTES  # the index read no further, so no cited line lies past it in the file it read
WINDOW_BYTES = 1 << 20  # a huge file's window: 600 lines of code or prose fit several times over


@dataclass(frozen=True)
class Excerpt:
    """What the viewer shows of a file: ``text`` (plain), its first line's number in the file or page, the passage's
    lines in it (0-based, inclusive; None: not found at the cited place), where it is ("showing lines 1–300 of
    300", "page 3 of 5") and how many bytes of the file were read for it."""

    text: str
    first_line: int
    marked: tuple[int, int] | None
    where: str
    bytes_read: int


def _flat(text: str) -> str:
    return " ".join(text.split())


def _shown(lines: list[str]) -> str:
    return "\n".join(line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " …" for line in lines).replace(
        "\0", "\ufffd")


def _window(lines: list[str], first: int, start: int, end: int, passage: str, where: str,
            read: int) -> Excerpt:
    """``lines`` (the file's from line ``first``) cut to the window around ``start``–``end`` (1-based)."""
    top = max(first, start - CONTEXT_LINES)
    bottom = min(first + len(lines) - 1, max(end, top + WINDOW_LINES - 1))
    shown = lines[top - first:bottom - first + 1]
    cited = "\n".join(lines[start - first:end - first + 1]) if first <= start <= end < first + len(lines) else ""
    marked = (start - top, end - top) if cited and _flat(passage) in _flat(cited) else None
    return Excerpt(_shown(shown), top, marked, where.format(top=top, bottom=bottom), read)


def _found(lines: list[str], passage: str) -> tuple[int, int] | None:
    """The 1-based line span of ``passage`` in ``lines`` (a PDF's page, a source without lines), or None."""
    text = "\n".join(lines)
    at = text.find(passage.strip()) if passage.strip() else -1
    if at < 0:
        return None
    start = text.count("\n", 0, at) + 1
    return start, start + passage.strip().count("\n")


def read_excerpt(path: Path, source: Source) -> Excerpt:
    """``source``'s place in the file at ``path`` (resolved, checked by the caller); Unreadable naming why not."""
    try:
        size = os.stat(path, follow_symlinks=False).st_size
    except OSError as exc:
        raise Unreadable(f"the file can't be read now ({exc.strerror or exc})") from None
    if size > MAX_FILE_BYTES:
        return _large(path, source, size)
    document = read_document(path)
    if document.is_pdf:
        page = source.page or 1
        if page > len(document.pages):
            return Excerpt("", 1, None, f"the PDF has {len(document.pages)} page(s) now, not page {page}", size)
        lines = document.pages[page - 1].splitlines()
        span = _found(lines, source.text)
        start, end = span or (1, 1)
        excerpt = _window(lines, 1, start, end, source.text, "", size)
        return Excerpt(excerpt.text, excerpt.first_line, excerpt.marked if span else None,
                       f"page {page} of {len(document.pages)}", size)
    lines = document.text.splitlines()
    if source.line_start is None:  # a source without lines: the passage found in the file
        start, end = _found(lines, source.text) or (1, 1)
    else:
        start, end = source.line_start, source.line_end or source.line_start
    return _window(lines, 1, start, end, source.text, f"showing lines {{top:,}}–{{bottom:,}} of {len(lines):,}", size)


def _large(path: Path, source: Source, size: int) -> Excerpt:
    """A file past MAX_FILE_BYTES: newlines counted up to the window's first line, then one window read."""
    start = source.line_start or 1
    end = source.line_end or start
    top = max(1, start - CONTEXT_LINES)
    try:
        with opened_regular(path, follow_symlinks=False) as (fd, _info):
            line, offset, read, ends_line = 1, 0, 0, False
            while line < top and read < MAX_SCAN_BYTES:
                chunk = os.pread(fd, CHUNK_BYTES, offset)
                if not chunk:
                    break
                read += len(chunk)
                ends_line = chunk.endswith(b"\n")
                if line + chunk.count(b"\n") < top:
                    line += chunk.count(b"\n")
                    offset += len(chunk)
                    continue
                at = 0
                while line < top:
                    at = chunk.index(b"\n", at) + 1
                    line += 1
                offset += at
            if line < top and read < MAX_SCAN_BYTES:  # the file ended first: it was cut since it was indexed
                return Excerpt("", top, None, f"the file has {line - ends_line:,} lines now", read)
            if line < top:
                raise Unreadable(f"line {start:,} is past the first {MAX_SCAN_BYTES >> 20} MiB of this "
                                 f"{size / 2**20:,.0f} MiB file, which the viewer doesn't read")
            window = os.pread(fd, WINDOW_BYTES, offset)
            read += len(window)
    except NotRegularFile:
        raise Unreadable("not a regular file now") from None
    except OSError as exc:
        raise Unreadable(f"the file can't be read now ({exc.strerror or exc})") from None
    lines = window.decode("utf-8", errors="replace").split("\n")[:WINDOW_LINES]
    where = f"showing lines {{top:,}}–{{bottom:,}} of a {size / 2**20:,.0f} MiB file (read only around the passage)"
    return _window(lines, top, start, end, source.text, where, read)
