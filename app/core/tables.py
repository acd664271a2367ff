"""Report tables as rows of strings: one row builder per report feeds both the terminal and the dialog."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt(value: Any, spec: str, scale: float = 1.0) -> str:
    """``value`` formatted, or an en dash where it was not measured."""
    return "–" if value is None else format(value * scale, spec)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Rows as aligned columns for a terminal: the first column left, numbers right."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        parts = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return (indent + "  ".join(parts)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])
