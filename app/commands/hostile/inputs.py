"""The hostile inputs `nalar bench hostile` hands the window, made in a folder of its own (never downloaded).

Each maker is a plain function of the folder (files) or of nothing (text), so a new input is one function and one
line in the bench's case table.
"""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

from app.core.chat.conversation import Conversation, Turn

MEGABYTE = 1_000_000
HUGE_QUERY_WORDS = 100_000
LONG_CHAT_TURNS = 16_000
PDF_PAGES = 2_000
PDF_LINES = 600  # text lines in the one content stream every page shows: about 40 ms of pypdf a page here


# ---- answers -------------------------------------------------------------------------------------------

def price_list(size: int = MEGABYTE) -> str:
    """``$5 `` repeated: every ``$`` opens inline maths that never closes (``cut_maths`` was quadratic in them)."""
    return ("$5 " * (size // 3 + 1))[:size]


def long_formula(chars: int = 20_000) -> str:
    """One displayed formula of ``chars`` characters (``x+x+…``), on one line: ziamath needs minutes for it (2 KB
    took 1.7 s here). On lines of its own, the pane's commit at a line break past 4,000 characters splits it, and
    both halves show as text, never drawn."""
    body = "+".join(["x"] * (chars // 2))
    return f"The sum, written out:\n\n$${body}$$\n\nThat is all of it.\n"


def priced_chat(answer: str, title: str = "Prices") -> Conversation:
    """A stored chat whose one answer is ``answer``: reopened from the list, the answer pane renders it whole."""
    return Conversation(title=title, turns=[Turn("What does each item cost?", answer=answer, finish_reason="stop")])


# ---- Ctrl+K search ---------------------------------------------------------------------------------------

ZEBRA = "zebra"


def zebra_chat() -> Conversation:
    """What the search cases find: one chat that holds the query's first word."""
    return Conversation(title="Roads", turns=[Turn("what is a zebra crossing?", answer="Stripes where people cross.",
                                                   finish_reason="stop")])


def huge_query(words: int = HUGE_QUERY_WORDS) -> str:
    """``words`` words, the first of which finds the chat (a QLineEdit keeps its first 32,767 characters)."""
    return ZEBRA + " " + "crossing " * (words - 1)


# ---- File → Import ---------------------------------------------------------------------------------------

def open_brackets(folder: Path) -> Path:
    """100,000 ``[``: Python's JSON parser recursed past its limit (RecursionError, no banner)."""
    return _written(folder / "brackets.json", b"[" * 100_000)


def infinity_count(folder: Path) -> Path:
    """A token count of ``Infinity`` (OverflowError, no banner)."""
    return _written(folder / "infinity.json", b'{"messages": [{"user": "q", "thinking_tokens": Infinity}]}')


def linear_chat(folder: Path, turns: int = LONG_CHAT_TURNS) -> Path:
    """One chat of ``turns`` turns in a line, the last shown (234 KiB: 16.7 s on the GUI thread once)."""
    tree = [{"user": f"q{n}", "answer": f"a{n}", "parent": n - 1 if n else None} for n in range(turns)]
    data = {"title": "long", "messages": [], "tree": tree, "shown": turns - 1}
    return _written(folder / "long-chat.json", json.dumps(data).encode())


# ---- attachments -----------------------------------------------------------------------------------------

def fifo(folder: Path) -> Path:
    """A FIFO named like a text file: opening it blocked for ever."""
    path = folder / "notes.txt"
    os.mkfifo(path)
    return path


def dev_zero_link(folder: Path) -> Path:
    """A ``.txt`` that links to /dev/zero: read until memory ran out."""
    path = folder / "zeros.txt"
    path.symlink_to("/dev/zero")
    return path


def bom_then_bad_bytes(folder: Path) -> Path:
    """A UTF-8 byte order mark, then bytes that are not UTF-8 (UnicodeDecodeError past the bar)."""
    return _written(folder / "bom.txt", codecs.BOM_UTF8 + b"ok \xff\xfe\xfd")


def shared_stream_pdf(folder: Path, pages: int = PDF_PAGES, lines: int = PDF_LINES) -> Path:
    """``pages`` pages that all show one compressed content stream of ``lines`` text lines: about 290 KB on disk,
    and pypdf reads the stream again for every page (the 2,000-page one froze the window over 60 s)."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = writer._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica")}))
    stream = DecodedStreamObject()
    stream.set_data(b"".join(b"BT /F1 12 Tf 72 %d Td (line %d of the page) Tj ET\n" % (720 - n % 700, n)
                             for n in range(lines)))
    content = writer._add_object(stream.flate_encode())
    resources = writer._add_object(DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}))
    for _ in range(pages):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = resources
        page[NameObject("/Contents")] = content
    path = folder / "pages.pdf"
    with path.open("wb") as file:
        writer.write(file)
    return path


def release_fifo(path: Path) -> None:
    """A reader still blocked opening the FIFO ``path`` is let go (a writer opens it); nobody reading: nothing."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: no reader has it open
        pass


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
