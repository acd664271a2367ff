"""Token counts in the window over long texts: a reopened chat's long answer, a long attached file. The counts
still show (the keep-thinking switch's cost, the chip's tokens, the context gauge), but the model's tokenizer is
read and the long texts encoded on a worker, never on the GUI thread. The scripted engine double; the embedded
model's real tokenizer; a real SQLite history."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.models import token_count
from app.engine.scripted import ScriptedEngineDouble
from tests.conftest import require_embedded_model
from tests.ui.test_attachments_window import given_files
from tests.ui.test_window import wait_ready

PRICES = "$5 " * 40_000  # 120,000 characters: about a second of encoding on the GUI thread


class Watched:
    """The tokenizer, recording on which thread it is read and how many characters each call encodes there.
    With ``gate`` set, a worker's encode waits for it (a test's asks then can't race a count that ends first)."""

    gate: threading.Event | None = None

    def __init__(self, tokenizer: Any, calls: list[tuple[str, int]]) -> None:
        self.tokenizer, self.calls = tokenizer, calls

    def _held(self) -> None:
        if self.gate is not None and threading.current_thread() is not threading.main_thread():
            assert self.gate.wait(30), "the test never opened the gate"

    def encode(self, text: str, add_special_tokens: bool = False) -> Any:
        self.calls.append((threading.current_thread().name, len(text)))
        self._held()
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> Any:
        self.calls.append((threading.current_thread().name, sum(map(len, texts))))
        self._held()
        return self.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)


@pytest.fixture
def tokenizer_calls(qtbot, monkeypatch) -> list[tuple[str, int]]:
    """("read" or the characters encoded, the thread) for every use of the tokenizer. Counts still running from an
    earlier test (a closed window's count ends on its worker, its result dropped) end first: one that stored its
    counts after ``forget_counts`` made this file's first ask cheap, and the test failed on the worker's order."""
    from app.ui.controllers.operations import runner

    calls: list[tuple[str, int]] = []
    read = token_count._tokenizer

    def watched_read(path: Path) -> Watched:
        calls.append((threading.current_thread().name, -1))
        return Watched(read(path), calls)

    def counts_ended() -> bool:
        return all(op.wait(60) for op in list(runner().live) if op.what.startswith("Counting tokens"))

    assert counts_ended(), "an earlier test's token count is still running"
    token_count.forget_counts()
    monkeypatch.setattr(token_count, "_tokenizer", watched_read)
    yield calls
    assert counts_ended(), "this test's token count is still running"
    token_count.forget_counts()


def on_gui_thread(calls: list[tuple[str, int]]) -> list[tuple[str, int]]:
    main = threading.main_thread().name
    return [(thread, chars) for thread, chars in calls if thread == main and (chars < 0 or chars > 20_000)]


def test_a_reopened_chats_long_answer_is_counted_off_the_gui_thread(qtbot, make_window, tokenizer_calls) -> None:
    """Hostile input: a stored chat whose first answer is a 120,000-character price list, its thinking kept
    switchable. Bugs caught: the keep-thinking switches (``keep_switches``) and the context gauge encoded it on the
    GUI thread as the chat opened (1.0 s in ``nalar bench hostile``), and the first count read tokenizer.json
    there (0.2 s). The switch says "counting tokens…" until its figures arrive, then shows them."""
    store = HistoryStore()
    store.add_conversations([Conversation(title="Prices", turns=[
        Turn("What does each item cost?", thinking="list them", answer=PRICES, finish_reason="stop"),
        Turn("And the total?", answer="Too many to add.", finish_reason="stop")])])
    store.close()
    window = make_window(ScriptedEngineDouble())
    wait_ready(qtbot, window)
    transcript = window.chat_view.transcript
    # The long answer is past a page's characters: the thread opens on the last question; the reader asks for it.
    qtbot.waitUntil(lambda: window.chat_view.pages.first == 1, timeout=10_000)
    window.chat_view.pages.earlier()
    qtbot.waitUntil(lambda: "Keep its thinking: off (" in transcript.toPlainText()
                    and "tokens;" in transcript.toPlainText(), timeout=60_000)
    qtbot.waitUntil(lambda: "counting" not in window.gauges.context_bar.format(), timeout=60_000)
    assert "counting" not in transcript.toPlainText()
    assert any(chars >= len(PRICES) for _thread, chars in tokenizer_calls), "the long answer was counted"
    assert on_gui_thread(tokenizer_calls) == [], "the GUI thread read the tokenizer or encoded a long text"


def test_a_long_file_is_attached_with_its_tokens_counted_off_the_gui_thread(qtbot, make_window, tmp_path: Path,
                                                                           tokenizer_calls) -> None:
    """Hostile input: a 120,000-character text file attached. Bug caught: its chip counted its tokens on the GUI
    thread as it was drawn (``chip_text``: 0.8 s for 1 MB in ``nalar bench hostile``). The chip says "counting
    tokens…" until the count arrives, then the count."""
    window = make_window(ScriptedEngineDouble())
    wait_ready(qtbot, window)
    prices = tmp_path / "prices.txt"
    prices.write_text(PRICES)
    given_files(window, prices)
    bar = window.attachments
    assert len(bar.attachments) == 1
    qtbot.waitUntil(lambda: "tokens counted" not in bar.chip_text(bar.attachments[0])
                    and "counting" not in bar.chip_text(bar.attachments[0]), timeout=60_000)
    shown = f"{bar.counter.count(PRICES):,} tokens"
    assert bar.chip_text(bar.attachments[0]).endswith(shown)
    qtbot.waitUntil(lambda: any(label.text().endswith(shown) for label in bar.findChildren(QLabel)), timeout=5_000)
    assert on_gui_thread(tokenizer_calls) == [], "the GUI thread read the tokenizer or encoded the file"


def test_a_newer_ask_drops_the_stale_count_and_the_same_ask_shares_one(qtbot, tokenizer_calls,
                                                                       monkeypatch) -> None:
    """Bugs it would catch: a stale count's ``then`` run after a newer one's (a chip or switch drawn with the older
    texts' state), or each redraw while a 120,000-character text is counted starting one more worker on it."""
    from PySide6.QtCore import QObject

    from app.ui.controllers.operations import TokenCounts, runner

    counter = token_count.counter_for(require_embedded_model())
    owner = QObject()
    counts, ran = TokenCounts(owner), []
    first, second = PRICES, PRICES + " and more"
    gate = threading.Event()  # the counts wait until all three asks are in (a loaded machine let one finish first)
    monkeypatch.setattr(Watched, "gate", gate)
    assert not counts.counted(counter, "chips", [first], lambda: ran.append("first"))
    assert not counts.counted(counter, "chips", [first], lambda: ran.append("first again"))
    assert not counts.counted(counter, "chips", [second], lambda: ran.append("second"))
    gate.set()
    qtbot.waitUntil(lambda: not any(op.what.startswith("Counting tokens") for op in runner().live), timeout=30_000)
    assert ran == ["second"], "only the newest ask's then runs"
    encoded = [chars for _thread, chars in tokenizer_calls if chars >= len(PRICES)]
    assert len(encoded) == 2, f"the same texts were counted {len(encoded) - 1} times: {encoded}"
    assert counts.counted(counter, "chips", [second], lambda: ran.append("now")) and ran == ["second"]
