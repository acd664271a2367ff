"""Text from outside (servers, models, tools, files) shown as text, never as Qt rich text.

Qt's labels and tooltips default to AutoText: a string that looks like HTML is rendered, so an error
body holding ``<img width=4000 height=4000>`` grew a banner to 4000 px, and a link could be clicked.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget


def plain_label(text: str = "", parent: QWidget | None = None, *, word_wrap: bool = False) -> QLabel:
    """A QLabel that shows its text literally, whatever it holds."""
    label = QLabel(parent)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(word_wrap)
    label.setText(text)
    return label


def escaped(text: str) -> str:
    """``text`` made safe to put inside our own markup (line breaks kept)."""
    return html.escape(text, quote=False).replace("\n", "<br>")


def plain_tooltip(text: str) -> str:
    """A tooltip string Qt shows literally: tooltips have no text format, so the text is escaped inside
    our own paragraph (a tooltip that isn't rich text is shown as-is, but Qt guesses, so never leave it to it)."""
    return f"<p style='white-space:pre-wrap'>{escaped(text)}</p>" if text else ""
