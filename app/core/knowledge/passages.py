"""A document cut into passages of a few hundred tokens, at paragraph and then line boundaries, each with the
line span it came from, so a citation can open the file at that place.

Token counts here are an approximation, not a tokenizer's: a character count divided by CHARS_PER_TOKEN (English
prose and code run 3.5-4.5 characters a token in the Qwen and Llama tokenizers), so a budget holds on any model
without loading one. ``context.knowledge_for`` takes a real tokenizer's count when the caller has one.
"""

from __future__ import annotations

from dataclasses import dataclass

CHARS_PER_TOKEN = 4
TARGET_CHARS = 1_200  # about 300 tokens: a passage is a few paragraphs, small enough that 6 fit a 2,000-token budget
MIN_CHARS = 400  # a paragraph break ends a passage only past this, so headings stay with their text


def approx_tokens(text: str) -> int:
    """Characters / CHARS_PER_TOKEN, rounded up; at least 1 for any text."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN)) if text else 0


@dataclass(frozen=True)
class Piece:
    """One passage's text and its 1-based line span in the text it was cut from."""

    text: str
    line_start: int
    line_end: int


def pieces(text: str, target: int = TARGET_CHARS) -> list[Piece]:
    """``text`` in passages of at most ``target`` characters (a longer line is cut inside itself), ended at a blank
    line once past MIN_CHARS, else at a line end; blank-only passages are dropped."""
    out: list[Piece] = []
    lines: list[str] = []
    start = end = size = 0  # the passage's first and last non-blank line, its characters so far

    def flush() -> None:
        nonlocal lines, size
        body = "\n".join(lines).strip()
        if body:
            out.append(Piece(body, start, end))
        lines, size = [], 0

    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            if size >= min(MIN_CHARS, target):
                flush()
            elif lines:
                lines.append("")
            continue
        if size and size + len(line) + 1 > target:
            flush()
        if not lines:
            start = number
        end = number
        while len(line) > target:  # a minified file or a paragraph on one line: cut inside it, same line span
            cut = line.rfind(" ", target // 2, target)
            cut = cut if cut > 0 else target
            lines.append(line[:cut])
            size += cut
            flush()
            start, line = number, line[cut:].lstrip()
        lines.append(line)
        size += len(line) + 1
    flush()
    return out
