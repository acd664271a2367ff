"""An answer shown in a QTextBrowser (AnswerPane, re-rendered at a bounded rate): formulas drawn as images, code
copied per block, links opened only where that is safe.

Formulas are drawn by the process's one FormulaDrawer (app/ui/chat/answer/formulas.py) into images the document
holds as resources. A formula shows as its source until it is drawn, and stays so where ziamath can't draw it.

Links open only for http and https, and only after the window has shown the real address when the link's
text says another; any other scheme is refused with its address shown.
"""

from __future__ import annotations

import html as html_module
import logging
import re
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, QUrl
from PySide6.QtGui import (
    QDesktopServices,
    QGuiApplication,
    QImage,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QFrame, QLabel, QMessageBox, QTextBrowser, QVBoxLayout, QWidget

from app.core.chat.answer_markup import (
    COPY_SCHEME,
    LINK_SCHEME,
    MATH_SCHEME,
    Collected,
    Link,
    answer_html,
)
from app.ui.chat.answer.formulas import formula_drawer
from app.ui.chat.panes import text_source

log = logging.getLogger(__name__)
MARKDOWN_REFRESH_MS = 100
# Past this, the answer's streaming tail is committed at a line break so re-renders stay short.
MAX_MARKDOWN_TAIL = 4000
OPENABLE_SCHEMES = ("http", "https")
# Characters one refresh renders: the new text first, then the chunks whose formulas were drawn, while this
# leaves room (at least one when nothing else renders); the rest wait for the next refresh.
RENDER_BUDGET = 6000
# The most finished text one refresh commits: a reopened 1 MB answer (or what a fast stream delivered during a slow
# refresh) is committed over several refreshes instead of holding the window for seconds in one.
# 32,000 held it 0.2 s a refresh on the busy 2-core machine (Qt's layout of the inserted blocks as much as the
# Markdown); 12,000 keeps a refresh well under 100 ms there, and a backlog refreshes every BACKLOG_REFRESH_MS.
COMMIT_BUDGET = 12_000
BACKLOG_REFRESH_MS = 25  # text left by the budget is committed in the next refreshes, soon, the loop free between
_IMAGE = re.compile(f'<img src="{MATH_SCHEME}:([0-9a-f]+)" title="([^"]*)"[^>]*>')


def link_refusal(link: Link) -> str | None:
    """Why a link must not open, or None where it may (after the address is shown, if the text differs)."""
    scheme = QUrl(link.href).scheme().lower()
    if scheme not in OPENABLE_SCHEMES:
        return (f"Nalar opens only http and https links. This one ({scheme or 'no'} scheme) was not opened:"
                f"\n\n{link.href}")
    return None


def link_text_differs(link: Link) -> bool:
    """The reader saw one address and the link goes to another (a link's text written as a URL)."""
    def bare(text: str) -> str:
        return text.strip().rstrip("/").lower()
    return bare(link.text) != bare(link.href)


class AnswerDocument:
    """The rendered answer in one QTextBrowser, and what its numbered links, code and formulas refer to.

    A formula shows as its source until its image is drawn; then ``redraw`` (the owner's) renders again from
    where that formula is (it is given the formula's key).
    """

    def __init__(self, view: QTextBrowser, redraw: Callable[[str], None]) -> None:
        self.view = view
        self.redraw = redraw
        self.collected = Collected()
        self.citations: Callable[[], int] = lambda: 0  # the turn's knowledge sources: [1] … [n] become links
        # Opens a cited Link's source (its href: nalar-cite:N or nalar-source:MESSAGE_ID/N); None: nothing opened.
        self.cite: Callable[[str], object] | None = None
        self._images: dict[str, QImage | None] = {}  # formula key → its image, or None: shown as source
        self._waiting: set[str] = set()
        view.setOpenLinks(False)
        view.setOpenExternalLinks(False)
        view.anchorClicked.connect(self.on_anchor)
        # Queued: the result comes from the worker thread, and the document may be touched on the GUI thread only.
        formula_drawer().drawn.connect(self._on_drawn, Qt.ConnectionType.QueuedConnection)

    def clear(self) -> None:
        self.collected = Collected()

    def html(self, markdown: str, streaming: bool = False, collected: Collected | None = None,
             sources: tuple[int | None, int] | None = None) -> str:
        """``markdown`` as HTML for this view; the images of its drawn formulas are added to the document.
        What it numbers goes to ``collected`` (default: the document's own). ``sources``: an earlier turn's
        (message id, source count), whose [n] link to its own sources; else the shown turn's (``citations``)."""
        collected = self.collected if collected is None else collected
        first = len(collected.formulas)
        turn, citations = sources if sources is not None else (None, self.citations())
        rendered = answer_html(markdown, collected, streaming, citations, turn)
        document = self.view.document()
        for formula in collected.formulas[first:]:
            key = formula.key
            if key not in self._images:
                drawn, image = formula_drawer().drawn_before(key)
                if drawn:  # drawn for another document: shown now, not after a round trip and a render more
                    self._images[key] = image
            if (image := self._images.get(key)) is not None:
                document.addResource(QTextDocument.ResourceType.ImageResource, QUrl(f"{MATH_SCHEME}:{key}"), image)
            elif key not in self._images and key not in self._waiting:
                self._waiting.add(key)
                formula_drawer().request(formula)
        return _IMAGE.sub(lambda m: m.group(0) if self._images.get(m.group(1)) is not None else
                          f'<code style="color: #57606a">{m.group(2)}</code>', rendered)

    def _on_drawn(self, key: str, image: QImage | None) -> None:
        if key in self._waiting:
            self._waiting.discard(key)
            self._images[key] = image
            if image is not None:
                self.redraw(key)

    @property
    def drawing(self) -> bool:
        """Formulas of this document still being drawn."""
        return bool(self._waiting)

    def insert(self, cursor: QTextCursor, markdown: str, streaming: bool = False,
               collected: Collected | None = None) -> None:
        html = self.html(markdown, streaming, collected)
        if html.startswith('<p align="center">'):  # insertHtml's first paragraph takes the cursor's block format
            centred = cursor.blockFormat()
            centred.setAlignment(Qt.AlignmentFlag.AlignHCenter)
            cursor.setBlockFormat(centred)
        cursor.insertHtml(html)

    def source_link(self, href: str, text: str) -> str:
        """Our own link to a source (``href`` a cited one), ``text`` escaped; it opens through ``cite``."""
        self.collected.links.append(Link(href, text, cited=True))
        return (f'<a href="{LINK_SCHEME}:{len(self.collected.links) - 1}" style="text-decoration: none">'
                f'{html_module.escape(text, quote=False)}</a>')

    def on_anchor(self, url: QUrl) -> None:
        scheme, number = url.scheme(), url.path()
        if scheme == COPY_SCHEME and number.isdigit() and int(number) < len(self.collected.code_blocks):
            QGuiApplication.clipboard().setText(self.collected.code_blocks[int(number)])
        elif scheme == LINK_SCHEME and number.isdigit() and int(number) < len(self.collected.links):
            self.open_link(self.collected.links[int(number)])

    def open_link(self, link: Link) -> bool:
        """Opens ``link`` in the desktop's browser if it is safe and the reader agrees; whether it opened. A
        citation (a cited Link: ours, never the model's, whatever its href) opens its turn's source through
        ``cite``."""
        if link.cited:
            return self.cite is not None and self.cite(link.href) is not None
        if (refusal := link_refusal(link)) is not None:
            _message(self.view, QMessageBox.Icon.Warning, "Link not opened", refusal)
            return False
        if link_text_differs(link):
            box = _message(self.view, QMessageBox.Icon.Question, "Open this address?",
                           f"The link's text reads:\n{link.text}\n\nbut it opens:\n{link.href}\n\nOpen it?",
                           ask=True)
            if box != QMessageBox.StandardButton.Yes:
                return False
        return QDesktopServices.openUrl(QUrl(link.href))


def _message(parent: QTextBrowser, icon: QMessageBox.Icon, title: str, text: str,
             ask: bool = False) -> QMessageBox.StandardButton:
    """A message box whose text is plain: the address comes from the model."""
    box = QMessageBox(icon, title, text, parent=parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    if ask:
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        box.setDefaultButton(QMessageBox.StandardButton.No)
    return QMessageBox.StandardButton(box.exec())


class AnswerPane(QFrame):
    """The answer, rendered as Markdown with its maths and code (answer_view) at a bounded refresh rate.

    Finished paragraphs are committed in chunks of about MAX_MARKDOWN_TAIL characters, rendered once and kept;
    only the text still streaming is rendered again, so the cost of a refresh does not grow with the answer. A
    drawn formula renders again only its own chunk, within a refresh's RENDER_BUDGET.
    """

    def __init__(self, parent: QWidget | None = None, source: Callable[[], str] | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("AnswerPane")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.header = QLabel("Answer")
        self.view = QTextBrowser()
        self.view.setObjectName("AnswerText")
        self.view.setPlaceholderText("The answer streams here.")
        self.document = AnswerDocument(self.view, self._redraw_formula)  # links open only through its checks
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.header)
        layout.addWidget(self.view, 1)
        self._source, self._own = text_source(source)
        self._render_timer = QTimer(self)
        self._render_timer.setInterval(MARKDOWN_REFRESH_MS)
        self._render_timer.timeout.connect(self.render_markdown)
        self._reset()

    def _reset(self) -> None:
        self._streaming = True  # the text may stop inside a formula
        self._committed = 0  # characters of the text rendered for good
        self._tail_start = 0  # document position where the re-rendered tail begins
        self._dirty = False  # the tail needs rendering again
        self.view.clear()
        self.document.clear()
        self._marks = self.document.collected.marks()  # what the committed text numbered
        # Each committed chunk's start: (text offset, document position, marks before it). A drawn formula
        # renders again its chunk alone: from its chunk to the end, as before, re-parsed the rest of a formula-
        # dense answer for each image (seconds a refresh, `nalar bench ui`).
        self._chunks: list[tuple[int, int, tuple[int, int, int]]] = []
        self._chunks_of: dict[str, list[int]] = {}  # formula key → the chunks that hold it
        self._redraw: set[int] = set()  # chunks whose formulas were drawn since they were rendered

    def clear(self) -> None:
        if self._own is not None:
            self._own.keep(0)
        self._reset()

    def append(self, text: str) -> None:
        if self._own is not None:
            self._own.parts.append(text)
        self._dirty = True
        if not self._render_timer.isActive():
            self._render_timer.start()

    def keep(self, chars: int) -> None:
        """Show only the first ``chars`` of the answer (the loop guard cut the rest; a model already has)."""
        if self._own is not None:
            self._own.keep(chars)
        streaming = self._streaming
        self._reset()
        self._streaming = streaming
        self._dirty = True
        self.render_markdown()

    def text(self) -> str:
        return self._source()

    @property
    def drawing(self) -> bool:
        """Formulas still being drawn, or drawn and not yet in their place."""
        return self.document.drawing or bool(self._redraw)

    @staticmethod
    def _stable_end(text: str, start: int) -> int:
        """End of the finished blocks after ``start`` (a blank line outside a code fence), taken up to about
        MAX_MARKDOWN_TAIL characters: a longer finished text is committed in several chunks."""
        fence_open = False
        stable = position = start
        while position < len(text) and stable - start < MAX_MARKDOWN_TAIL:
            end = text.find("\n", position)
            line = text[position:] if end == -1 else text[position:end + 1]
            position += len(line)
            if line.lstrip().startswith("```"):
                fence_open = not fence_open
            elif not fence_open and line.strip() == "" and line.endswith("\n"):
                stable = position
            elif not fence_open and len(line) > 2 * MAX_MARKDOWN_TAIL:
                # One line longer than two chunks (1 MB of "$5 " in one line): committed at a space within a
                # chunk's length, else cut there, so no refresh renders the whole line again.
                limit = max(stable, position - len(line)) + MAX_MARKDOWN_TAIL
                space = text.rfind(" ", stable + 1, limit)
                return space + 1 if space > stable else limit
            elif not fence_open and position - start > MAX_MARKDOWN_TAIL and line.endswith("\n"):
                stable = position  # a huge paragraph: commit at a line break
        return stable

    def _redraw_formula(self, key: str) -> None:
        """A formula's image arrived: its chunks render again (a formula in the tail shows with the tail)."""
        chunks = self._chunks_of.get(key)
        if chunks:
            self._redraw.update(chunks)
        else:
            self._dirty = True
        if not self._render_timer.isActive():
            self._render_timer.start()

    def finish(self) -> None:
        """The answer is whole: a formula left open is text, not one still streaming."""
        self._streaming = False
        self._dirty = True
        self.render_markdown()

    def _insert_block(self, cursor: QTextCursor, markdown: str, streaming: bool,
                      collected: Collected | None = None) -> None:
        """Markdown in a fresh block: a fragment's first block would merge into the one before."""
        if cursor.position() > 0:
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            if cursor.currentList() is not None:
                cursor.currentList().remove(cursor.block())
        self.document.insert(cursor, markdown, streaming, collected)

    def _chunk_end(self, index: int) -> tuple[int, int]:
        """Where chunk ``index`` ends: (text offset, document position)."""
        if index + 1 < len(self._chunks):
            return self._chunks[index + 1][0], self._chunks[index + 1][1]
        return self._committed, self._tail_start

    def _render_chunk_again(self, index: int, text: str) -> None:
        """Chunk ``index`` rendered again in its place (its formulas were drawn); the chunks after it move."""
        offset, position, marks = self._chunks[index]
        end_offset, end_position = self._chunk_end(index)
        cursor = QTextCursor(self.view.document())
        cursor.setPosition(position)
        cursor.setPosition(end_position, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        # Its numbers as when it was committed; the chunks after it keep theirs.
        self._insert_block(cursor, text[offset:end_offset], False, self.document.collected.upto(marks))
        shift = cursor.position() - end_position
        self._chunks[index + 1:] = [(o, p + shift, m) for o, p, m in self._chunks[index + 1:]]
        self._tail_start += shift

    def render_markdown(self) -> None:
        if not self._dirty and not self._redraw:
            self._render_timer.stop()
            return
        text = self.text()
        bar = self.view.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        spent = 0
        if self._dirty:
            self._dirty = False
            spent = self._render_tail(text)
        for index in sorted(self._redraw):
            size = self._chunk_end(index)[0] - self._chunks[index][0]
            if spent and spent + size > RENDER_BUDGET:
                break
            self._render_chunk_again(index, text)
            self._redraw.discard(index)
            spent += size
        if at_bottom:
            bar.setValue(bar.maximum())
        self._render_timer.setInterval(BACKLOG_REFRESH_MS if self._dirty else MARKDOWN_REFRESH_MS)
        if self._dirty and not self._render_timer.isActive():  # text left for the next refreshes
            self._render_timer.start()

    def _render_tail(self, text: str) -> int:
        """The text after the committed chunks rendered again, its finished blocks committed; its length."""
        start = self._committed
        cursor = QTextCursor(self.view.document())
        cursor.setPosition(self._tail_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self.document.collected.truncate(self._marks)  # the tail numbers its links and code anew
        while (stable := self._stable_end(text, self._committed)) > self._committed:
            if self._committed - start >= COMMIT_BUDGET:  # the rest in the next refreshes; none rendered now
                self._dirty = True
                return self._committed - start
            self._chunks.append((self._committed, self._tail_start, self._marks))
            self._insert_block(cursor, text[self._committed:stable], streaming=False)
            for formula in self.document.collected.formulas[self._marks[0]:]:
                self._chunks_of.setdefault(formula.key, []).append(len(self._chunks) - 1)
            self._committed = stable
            self._tail_start = cursor.position()
            self._marks = self.document.collected.marks()
        if text[self._committed:]:
            self._insert_block(cursor, text[self._committed:], streaming=self._streaming)
        return len(text) - start
