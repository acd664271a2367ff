"""A long thread drawn a page at a time: the newest page first, "Show N earlier turns" at the top, a jump to a
turn outside the drawn pages. Real ChatViews and real clicks; no engine (the thread is drawn from a Conversation).
"""

from __future__ import annotations

from PySide6.QtWidgets import QTextBrowser

from app.core.chat.conversation import Conversation, Turn
from app.ui.chat.chat_view import ChatView
from app.ui.chat.thread.pages import PAGE_CHARS, PAGE_TURNS
from tests.ui.test_window_branches import click_link

LONG = 16_000  # the turns of the hostile import case (``nalar bench hostile``: 14.4 s in one setHtml)


def anchors(browser: QTextBrowser) -> list[str]:
    """The turns' anchors the transcript holds, in order."""
    names: list[str] = []
    block = browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            names += [name for name in it.fragment().charFormat().anchorNames() if name.startswith("turn-")]
            it += 1
        block = block.next()
    return names


def chat(turns: int, answer: str = "a{n}") -> Conversation:
    return Conversation(title="long", turns=[Turn(f"q{n}", answer=answer.format(n=n), finish_reason="stop")
                                             for n in range(turns)])


def mixed(turns: int) -> Conversation:
    """Plain answers, Markdown, code blocks and tables, so a page put at the top must join the one below exactly."""
    shapes = ["plain {n}", "**bold** {n}\n\n- a\n- b", "code {n}\n\n```py\nx = 1\n```\n",
              "| a | b |\n|---|---|\n| {n} | 2 |"]
    return Conversation(title="mixed", turns=[Turn(f"question {n}", answer=shapes[n % 4].format(n=n),
                                                   finish_reason="stop") for n in range(turns)])


def test_a_16000_turn_thread_opens_on_its_newest_page(qtbot) -> None:
    """Hostile input: a 16,000-turn chat opened. Bug caught: ``render_thread`` drew every turn in one setHtml,
    14.4 s on the GUI thread. Now it draws at most PAGE_TURNS turns, ending with the last question, under a link
    that says how many are not shown."""
    view = ChatView()
    qtbot.addWidget(view)
    view.render_thread(chat(LONG))
    drawn = anchors(view.transcript)
    assert len(drawn) <= PAGE_TURNS and drawn[-1] == f"turn-{LONG - 1}", drawn[-3:]
    text = view.transcript.toPlainText()
    assert f"▲ Show {PAGE_TURNS} earlier turns ({LONG - PAGE_TURNS:,} not shown)" in text, text[:200]
    assert text.rstrip().endswith(f"q{LONG - 1}")


def test_long_answers_make_a_shorter_page(qtbot) -> None:
    """Bug it would catch: a page of PAGE_TURNS answers of 20 KB each (1 MB of Markdown, seconds to draw)."""
    view = ChatView()
    qtbot.addWidget(view)
    view.render_thread(chat(200, answer="{n} " + "word " * 4_000))
    assert 2 <= len(anchors(view.transcript)) <= 2 + PAGE_CHARS // 20_000


def test_paging_back_to_the_start_reads_as_the_thread_drawn_whole_and_keeps_the_view(qtbot) -> None:
    """Bugs it would catch: a page put at the top that joined the one below wrongly (a merged or doubled line, a
    lost table or code block), the link left behind, the turns out of order, or the view jumping away from what
    the reader was looking at each time a page arrived."""
    conversation = mixed(2 * PAGE_TURNS + 7)
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    view.render_thread(conversation)
    bar = view.transcript.verticalScrollBar()
    first = view.pages.first
    click_link(qtbot, view.transcript, f"nalar-turn:{first}/earlier")  # the link the reader clicks
    assert 0 < view.pages.first < first
    while view.pages.first > 0:
        bar.setValue(bar.maximum() // 2)
        seen = bar.maximum() - bar.value()  # the reader's place, from the end: what a page put above leaves alone
        view.pages.earlier()
        assert bar.maximum() - bar.value() == seen, "the view jumped as the page arrived"
    whole = ChatView()
    qtbot.addWidget(whole)
    whole.pages.conversation = conversation
    whole.pages.draw(0, len(conversation.turns))
    assert view.transcript.toPlainText() == whole.transcript.toPlainText()
    assert anchors(view.transcript) == [f"turn-{n}" for n in range(len(conversation.turns))]


def test_a_jump_to_an_early_turn_draws_its_page_and_the_newest_link_goes_back(qtbot) -> None:
    """Bugs it would catch: a search hit in turn 3 of a 16,000-turn chat that drew all 15,997 turns after it
    (14 s), or scrolled to an anchor not drawn (nothing happened); no way back to the newest turns."""
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    conversation = chat(LONG)
    view.render_thread(conversation)
    view.scroll_to_turn(3)
    drawn = anchors(view.transcript)
    assert "turn-3" in drawn and len(drawn) <= PAGE_TURNS + 1 and drawn[0] == "turn-1", drawn[:3]
    assert "▼ Show the newest turns" in view.transcript.toPlainText()
    view.scroll_to_turn(LONG - 1 - PAGE_TURNS)  # not drawn: a page of its own again
    assert f"turn-{LONG - 1 - PAGE_TURNS}" in anchors(view.transcript)
    click_link(qtbot, view.transcript, f"nalar-turn:{view.pages.stop}/latest")
    assert anchors(view.transcript)[-1] == f"turn-{LONG - 1}" and len(anchors(view.transcript)) <= PAGE_TURNS


def test_a_send_after_paging_back_appends_and_keeps_the_earlier_pages(qtbot) -> None:
    """Bug it would catch: the pages read back dropped (the thread redrawn from its newest page) at each send."""
    conversation = chat(PAGE_TURNS + 10)
    view = ChatView()
    qtbot.addWidget(view)
    view.render_thread(conversation)
    view.pages.earlier()
    assert view.pages.first == 0
    conversation.add_turn(Turn("one more"))
    view.render_thread(conversation)
    drawn = anchors(view.transcript)
    assert drawn == [f"turn-{n}" for n in range(len(conversation.turns))]
