"""Which turns of the shown conversation the transcript draws: the newest page, and more on demand.

Drawing a thread costs about 1 ms a turn on the GUI thread (Markdown, then Qt's layout): a 16,000-turn chat
imported and opened held the window 14 s in one ``setHtml``. As chat apps do, the transcript draws the newest
page (PAGE_TURNS turns, fewer when their text passes PAGE_CHARS) and, above it, a link "Show N earlier turns" that
draws the page before at the top, the view kept where the reader was; paged back to the start, the thread reads
exactly as one drawn whole. A search hit or a jump to a turn outside the drawn pages draws a page from a little
above it instead, with a link below to the newest turns. A send appends its reply and question as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QTextBrowser

from app.core.chat.conversation import Conversation, Turn
from app.core.steering.kept_thinking import KeepSwitch
from app.ui.chat.answer_view import AnswerDocument
from app.ui.chat.thread.markup import TURN_SCHEME, question_html, reply_html

PAGE_TURNS = 50  # about 50 ms of drawing for short turns on a 2-core machine
PAGE_CHARS = 50_000  # a page of long answers stops sooner: their Markdown is what costs
CONTEXT_TURNS = 2  # a jump to a turn draws this many turns above it
Switches = Callable[[Conversation], Sequence[KeepSwitch | None]]


def page_start(turns: Sequence[Turn], stop: int) -> int:
    """Where the page that ends before ``stop`` begins: at most PAGE_TURNS turns, and no more once their text
    passes PAGE_CHARS (one turn at least)."""
    start, chars = stop, 0
    while start > 0 and stop - start < PAGE_TURNS:
        chars += len(turns[start - 1].user) + len(turns[start - 1].answer)
        if chars > PAGE_CHARS and start < stop:
            break
        start -= 1
    return start


def page_end(turns: Sequence[Turn], first: int) -> int:
    """Where the page that begins at ``first`` ends (the same bounds, forward)."""
    stop, chars = first, 0
    while stop < len(turns) and stop - first < PAGE_TURNS:
        chars += len(turns[stop].user) + len(turns[stop].answer)
        if chars > PAGE_CHARS and stop > first:
            break
        stop += 1
    return stop


class ThreadPages:
    """The drawn turns, ``first`` to ``stop`` (the end: the last question, which the live panes below answer),
    of the conversation the transcript shows."""

    def __init__(self, browser: QTextBrowser, document: AnswerDocument, switches: Switches) -> None:
        self.browser, self.document, self.switches = browser, document, switches
        self.conversation: Conversation | None = None
        self.shown: tuple[str, list[Turn]] | None = None  # (conversation id, the turns) the transcript shows
        self.first = self.stop = 0

    def render(self, conversation: Conversation) -> None:
        """The conversation's thread: a send's new turn appended; the same conversation again (another branch, a
        redraw) on the pages drawn; another one from its newest page."""
        turns = conversation.turns
        self.conversation = conversation
        if len(turns) >= 2 and self._shows_all_but_last(conversation):
            switches = self.switches(conversation)
            cursor = QTextCursor(self.browser.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertBlock()  # as setHtml ends a table: the reply starts below it
            cursor.insertHtml(reply_html(turns[-2], self.document, switches[-2])
                              + question_html(turns[-1], len(turns) - 1, conversation.branch_places()[-1]))
            self.stop = len(turns)
        elif self.shown is not None and self.shown[0] == conversation.id and turns:
            at_end = self.stop >= len(self.shown[1])
            self.draw(min(self.first, len(turns) - 1), len(turns) if at_end else min(self.stop, len(turns)))
        else:
            self.draw(page_start(turns, len(turns)), len(turns))
        self.shown = (conversation.id, list(turns))

    def draw(self, first: int, stop: int) -> None:
        """Turns ``first`` to ``stop`` in one ``setHtml``, with the links to the pages around them."""
        assert self.conversation is not None
        turns, last = self.conversation.turns, len(self.conversation.turns) - 1
        stop = len(turns) if stop >= last else stop  # the last question is never left alone below a link
        self.document.clear()
        parts = [self._earlier_link(first)] if first > 0 else []
        parts.append(self._turns_html(first, stop))
        if stop < len(turns):
            parts.append(f'<p><a href="{TURN_SCHEME}:{stop}/latest">▼ Show the newest turns</a> '
                         f"<small>({len(turns) - stop:,} after these)</small></p>")
        self.browser.setHtml("".join(parts))
        self.first, self.stop = first, stop

    def earlier(self) -> None:
        """The page before the first drawn, put in place of the link at the top; the view stays on what it showed."""
        if self.conversation is None or self.first == 0:
            return
        first = page_start(self.conversation.turns, self.first)
        markup = (self._earlier_link(first) if first > 0 else "") + self._turns_html(first, self.first).rstrip()
        bar = self.browser.verticalScrollBar()
        below = bar.maximum() - bar.value()  # what the reader sees, measured from the end (unchanged by the insert)
        cursor = QTextCursor(self.browser.document())
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)  # the link
        cursor.insertHtml(markup)
        self.first = first
        bar.setValue(bar.maximum() - below)

    def newest(self) -> None:
        if self.conversation is not None:
            turns = self.conversation.turns
            self.draw(page_start(turns, len(turns)), len(turns))

    def reveal(self, index: int) -> None:
        """Turn ``index`` drawn: by the pages before the first drawn when it is in the next one, else by a page
        from a little above it."""
        if self.conversation is None or self.first <= index < self.stop:
            return
        turns = self.conversation.turns
        if index < self.first and page_start(turns, self.first) <= index:
            self.earlier()
            return
        first = max(0, index - CONTEXT_TURNS)
        self.draw(first, max(page_end(turns, first), index + 1))

    def _turns_html(self, first: int, stop: int) -> str:
        assert self.conversation is not None
        conversation = self.conversation
        turns, places, switches = conversation.turns, conversation.branch_places(), self.switches(conversation)
        return "".join(question_html(turns[i], i, places[i])
                       + (reply_html(turns[i], self.document, switches[i]) if i < len(turns) - 1 else "")
                       for i in range(first, stop))

    def _earlier_link(self, first: int) -> str:
        count = first - page_start(self.conversation.turns if self.conversation else [], first)
        return (f'<p><a href="{TURN_SCHEME}:{first}/earlier">▲ Show {count} earlier turn{"s" * (count != 1)}</a> '
                f"<small>({first:,} not shown)</small></p>")

    def _shows_all_but_last(self, conversation: Conversation) -> bool:
        """The transcript shows this branch to its end but its new last question (a send), not another branch
        as long."""
        if self.shown is None or self.shown[0] != conversation.id or self.stop < len(self.shown[1]):
            return False
        shown, turns = self.shown[1], conversation.turns
        return len(shown) == len(turns) - 1 and all(a is b for a, b in zip(shown, turns, strict=False))
