"""The benchmark's documents, generated (no downloads): pages of text over a vocabulary of made-up words with a
topic per file, and PDFs written with pypdf (text drawn line by line, as a word processor's export is)."""

from __future__ import annotations

import random
from pathlib import Path

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

LINE_CHARS = 72
PAGE_LINES = 44  # about 3,100 characters, a printed page of prose
SYLLABLES = ("ka lo mi ne su ta ri po an el ve dro ash fen gul hor ist jun kel mur nob pra qua sel tor ump vex "
             "wyn").split()


def vocabulary(rng: random.Random, size: int = 6_000) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def page(rng: random.Random, words: list[str], topic: list[str]) -> list[str]:
    """PAGE_LINES lines of prose-like text, a quarter of its words from the file's topic (so queries have a
    right answer), paragraphs every 6-10 lines."""
    lines: list[str] = []
    line, until_break = "", rng.randint(6, 10)
    while len(lines) < PAGE_LINES:
        word = rng.choice(topic) if rng.random() < 0.25 else rng.choice(words)
        if len(line) + len(word) + 1 > LINE_CHARS:
            lines.append(line)
            line, until_break = "", until_break - 1
            if until_break == 0:
                lines.append("")
                until_break = rng.randint(6, 10)
            continue
        line = f"{line} {word}" if line else word.capitalize()
    return lines[:PAGE_LINES]


def write_text_files(folder: Path, rng: random.Random, words: list[str], files: int, pages_each: int,
                     ) -> list[list[str]]:
    """``files`` Markdown files of ``pages_each`` pages; each file's topic words."""
    topics = []
    for n in range(files):
        topic = rng.sample(words, 12)
        topics.append(topic)
        lines = [f"# Document {n}", ""]
        for _ in range(pages_each):
            lines += page(rng, words, topic) + [""]
        (folder / f"doc{n:04}.md").write_text("\n".join(lines), encoding="utf-8")
    return topics


def _pdf_string(text: str) -> bytes:
    """A PDF literal string's body: its backslashes and parentheses escaped."""
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")


def text_pdf(path: Path, pages: list[list[str]]) -> None:
    """A PDF of ``pages``, each a list of lines, in Helvetica: one content stream a page."""
    writer = PdfWriter()
    font = writer._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica")}))
    for lines in pages:
        sheet = writer.add_blank_page(612, 792)
        sheet[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
        body = b"".join(b"(" + _pdf_string(line) + b") Tj T* " for line in lines)
        stream = DecodedStreamObject()
        stream.set_data(b"BT /F1 10 Tf 12 TL 54 740 Td " + body + b"ET")
        sheet[NameObject("/Contents")] = writer._add_object(stream)
    with path.open("wb") as file:
        writer.write(file)


def write_pdfs(folder: Path, rng: random.Random, words: list[str], count: int, pages_each: int) -> list[list[str]]:
    topics = []
    for n in range(count):
        topic = rng.sample(words, 12)
        topics.append(topic)
        text_pdf(folder / f"paper{n:03}.pdf", [page(rng, words, topic) for _ in range(pages_each)])
    return topics
