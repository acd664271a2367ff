"""Report tables as rows of strings: one row builder per report feeds both the terminal and the dialog."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt(value: Any, spec: str, scale: float = 1.0) -> str:
    """``value`` formatted, or an en dash where it was not measured."""
    return "–" if value is None else format(value * scale, spec)


def _note_at(row: Sequence[str]) -> int | None:
    """Where a row turns into a note: its last filled cell, when 3 or more empty cells follow it
    (e.g. "fp8: not run" and the reason); the note does not widen its column."""
    filled = [i for i, cell in enumerate(row) if str(cell)]
    if filled and len(row) - 1 - filled[-1] >= 3:
        return filled[-1]
    return None


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Rows as aligned columns for a terminal: the first column left, numbers right."""
    widths = [len(str(h)) for h in headers]
    for row in rows:
        note = _note_at(row)
        for i, cell in enumerate(row[:note] if note is not None else row):
            widths[i] = max(widths[i], len(str(cell)))

    def line(cells: Sequence[str]) -> str:
        note = _note_at(cells)
        aligned = cells[:note] if note is not None else cells
        parts = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(aligned, widths))]
        if note is not None:
            parts.append(str(cells[note]))
        return (indent + "  ".join(parts)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])
