"""Hostile queries for Ctrl+K search: a pasted NUL, a lone surrogate, a query of 100,000 words, a history file
SQLite refuses, and a stale search still running when the next one starts.

Before: a NUL raised sqlite3.OperationalError and a lone surrogate UnicodeEncodeError out of
``SearchDialog.run_search``; 10,000 words took 1.9 s and 100,000 over 100 s, on the GUI thread.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.chat.history_search import SearchHit, search
from app.ui.controllers.operations import runner

HUGE_QUERY = "zebra " + "crossing " * 99_999  # 100,000 words; the first 64 still find the chat


def zebra_history() -> HistoryStore:
    store = HistoryStore()
    store.add_conversations([Conversation(title="Roads", turns=[
        Turn(user="what is a zebra crossing?", answer="Stripes where people cross.", finish_reason="stop")])])
    return store


class RecordingDb:
    """The store's connection, checking each FTS5 MATCH expression before SQLite runs it."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.expressions: list[str] = []

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        for value in params:
            if isinstance(value, str):
                self.expressions.append(value)
                assert value.count('"') // 2 <= 64 and len(value) <= 1_200, f"{len(value):,} characters sent"
        return self.db.execute(sql, params)


@pytest.mark.parametrize("query", ["zebra\x00", "\x00zebra", "zeb\x00", "zebra\x02\x03", "zebra\ud800",
                                   "\udc00zebra", "zeb\ud83dra"], ids=["nul-after", "nul-before", "nul-prefix",
                                                                       "search-marks", "lone-high", "lone-low",
                                                                       "surrogate-inside"])
def test_a_nul_or_a_lone_surrogate_is_searched_around_not_an_error(query: str) -> None:
    """Bugs caught: a pasted NUL raised sqlite3.OperationalError ("unrecognized token"), a lone surrogate
    UnicodeEncodeError, out of the search; the snippet marks (\\x02, \\x03) reached FTS5 as text."""
    store = zebra_history()
    assert [hit.title for hit in store.search(query) if hit.message_id is not None] == ["Roads"]


def test_a_query_of_100000_words_sends_sqlite_at_most_64_terms() -> None:
    """Bug caught: every word went into the MATCH expression: 100,000 words kept the GUI thread over 100 s."""
    store = zebra_history()
    recording = RecordingDb(sqlite3.connect(store.path))
    try:
        hits = search(recording, HUGE_QUERY)  # type: ignore[arg-type]  # a connection in all that search uses
    finally:
        recording.db.close()
    assert [hit.title for hit in hits if hit.message_id is not None] == ["Roads"]
    assert recording.expressions and all(e.count('"') // 2 <= 64 for e in recording.expressions)


def test_the_dialog_says_what_went_wrong_instead_of_raising(qtbot, make_window) -> None:
    """Bugs caught: a NUL or a lone surrogate typed or pasted into Ctrl+K raised past ``run_search`` (no
    results, no message); the cap was silent; a history file SQLite refuses (here: its title index dropped)
    raised sqlite3.OperationalError instead of a message in the dialog."""
    zebra_history().close()
    window = make_window(start=False)
    dialog = window.dialogs.open_search()
    qtbot.waitExposed(dialog)
    for query in ("zebra\x00", "zebra\ud800"):
        dialog.query.setText(query)
        dialog.run_search()
        qtbot.waitUntil(lambda: dialog.status.text() == "1 result(s)", timeout=10_000)
    dialog.query.setText(HUGE_QUERY[:30_000])  # a QLineEdit holds 32,767 characters
    dialog.run_search()
    qtbot.waitUntil(lambda: dialog.status.text().startswith("1 result(s) · only the first 64 words"),
                    timeout=10_000)
    other = sqlite3.connect(window.session.history.path)
    other.execute("DROP TABLE title_search")
    other.commit()
    other.close()
    dialog.query.setText("zebra")
    dialog.run_search()
    qtbot.waitUntil(lambda: dialog.status.text().startswith("The search failed (no such table"), timeout=10_000)
    assert dialog.hits == []
    dialog.reject()


class HeldSearch:
    """A search that returns only when released, to hold one running while the next starts."""

    def __init__(self, query: str, thinking: bool) -> None:
        self.query = query
        self.release = threading.Event()
        self.interrupted = False

    def run(self) -> list[SearchHit]:
        assert self.release.wait(10)
        return [SearchHit("id", self.query, 1, self.query, 0.0)]

    def interrupt(self) -> None:
        self.interrupted = True


def test_a_stale_search_is_interrupted_and_its_result_dropped(qtbot) -> None:
    """Bugs caught: each search held the GUI thread; a search still running when the next began delivered its
    hits over the newer ones; Enter before the results came chose nothing (or an older hit)."""
    from app.ui.dialogs.search_dialog import SearchDialog

    made: list[HeldSearch] = []
    dialog = SearchDialog(lambda query, thinking: made.append(HeldSearch(query, thinking)) or made[-1])
    qtbot.addWidget(dialog)
    dialog.query.setText("first")
    dialog.run_search()  # returns at once: the search runs on a worker
    assert dialog.status.text() == "Searching…"
    dialog.query.setText("second")
    dialog.run_search()
    assert made[0].interrupted and not made[1].interrupted
    made[1].release.set()
    qtbot.waitUntil(lambda: [hit.title for hit in dialog.hits] == ["second"], timeout=10_000)
    made[0].release.set()  # the stale one finishes late: dropped
    qtbot.waitUntil(lambda: not runner().live, timeout=10_000)
    assert [hit.title for hit in dialog.hits] == ["second"] and dialog.status.text() == "1 result(s)"

    dialog.query.setText("third")
    dialog.run_search()
    with qtbot.assertNotEmitted(dialog.chosen, wait=0):
        dialog.choose_current()  # Enter while it runs: chosen once the hits are in
    with qtbot.waitSignal(dialog.chosen, timeout=10_000) as chosen:
        made[2].release.set()
    assert chosen.args[0].title == "third"
