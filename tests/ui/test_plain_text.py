"""Text from outside shown as text: the error banner, the status bar, the notice line and tool tooltips.
A remote server's error body, a model id from /v1/models or an MCP tool's description must never be
rendered as Qt rich text (an image that resizes the window, a link that can be clicked)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument

from app.engine.events import StatusChanged
from app.ui.chat.panes import ErrorBanner
from app.ui.chat.plain_text import plain_label, plain_tooltip
from app.ui.chat.status_bar import EngineStatusBar

HOSTILE = '<img width=4000 height=4000 src="x.png"> <a href="file:///etc/passwd">click</a>'


def rendered(rich: str) -> str:
    document = QTextDocument()
    document.setHtml(rich)
    return document.toPlainText()


def test_a_banner_with_markup_keeps_its_size_and_shows_the_literal_text(qtbot) -> None:
    """Bug caught: the banner built f"<b>{problem}</b><br>{fix}" unescaped, so an error body holding
    <img width=4000 height=4000> grew the banner to 4000×4030 and a link in it could be clicked."""
    banner = ErrorBanner()
    qtbot.addWidget(banner)
    banner.show_problem("Plain problem", "Plain fix")
    normal = banner.sizeHint().height()
    banner.show_problem(f"Can't reach the server: {HOSTILE}", f"Fix: {HOSTILE}")
    assert banner.sizeHint().height() < normal * 3 and banner.sizeHint().width() < 2000
    assert HOSTILE in rendered(banner.message.text())  # what the user sees is the literal markup
    assert banner.text() == f"Can't reach the server: {HOSTILE}\nFix: {HOSTILE}"


def test_the_status_bar_and_labels_of_outside_text_show_markup_literally(qtbot) -> None:
    """Bug caught: the status bar (a remote's model id, a failover reason) used Qt's AutoText."""
    bar = EngineStatusBar()
    qtbot.addWidget(bar)
    bar.show_status(StatusChanged("ready", f"Ready: {HOSTILE}", None))
    for label in (bar.status_label, bar.api_label, plain_label(HOSTILE, word_wrap=True)):
        assert label.textFormat() == Qt.TextFormat.PlainText
    assert bar.status_label.text() == f"Ready: {HOSTILE}"
    assert bar.status_label.sizeHint().height() < 200


def test_a_tool_description_in_a_tooltip_is_shown_literally() -> None:
    """Bug caught: an MCP server's tool description went into a tooltip as-is, and Qt rendered its markup."""
    assert rendered(plain_tooltip(HOSTILE)) == HOSTILE
    assert "<img" not in plain_tooltip(HOSTILE) and plain_tooltip("") == ""
