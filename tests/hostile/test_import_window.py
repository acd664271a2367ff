"""File → Import with hostile files, through the window (scripted engine, never started): the file is read
and stored off the GUI thread with its steps shown, and every refusal reaches the banner."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from app.core.chat import history_import
from app.core.chat.history import HistoryStore
from app.core.chat.history_import import Imported
from app.engine.scripted import ScriptedEngineDouble


def test_a_file_of_open_brackets_gets_the_banner_not_an_uncaught_error(qtbot, make_window, tmp_path: Path) -> None:
    """Bug caught: ``"[" * 100000`` raised RecursionError out of File → Import: no banner, no message."""
    window = make_window(ScriptedEngineDouble(), start=False)
    listed = window.conversation_list.count()
    bad = tmp_path / "brackets.json"
    bad.write_bytes(b"[" * 100_000)
    operation = window.dialogs.import_conversations(str(bad))
    qtbot.waitUntil(lambda: operation.settled, timeout=10_000)
    assert window.banner.isVisible() and "Import failed: brackets.json: is not JSON" in window.banner.text()
    assert window.conversation_list.count() == listed and len(HistoryStore().conversations()) == listed


def test_the_file_is_read_and_stored_off_the_gui_thread_with_its_steps_shown(qtbot, make_window, tmp_path: Path,
                                                                              monkeypatch) -> None:
    """Bug caught: the import read, checked and stored on the GUI thread (a 16,000-turn chat froze the window
    16.7 s), with nothing said meanwhile. Here the read is held until the window has shown the step: a window
    blocked by the import could not."""
    window = make_window(ScriptedEngineDouble(), start=False)
    file = tmp_path / "chat.json"
    file.write_text(json.dumps({"title": "long", "messages": [{"user": f"q{n}", "answer": f"a{n}"}
                                                              for n in range(200)]}), encoding="utf-8")
    release, threads = threading.Event(), []

    def held_read(path: Path) -> Imported:
        threads.append(threading.current_thread())
        assert release.wait(30), "the test never released the read"
        return history_import.read_import(path)

    monkeypatch.setattr("app.ui.controllers.conversation_store.read_import", held_read)
    done: list[Imported] = []
    operation = window.dialogs.import_conversations(str(file)).success(done.append)
    try:
        qtbot.waitUntil(lambda: "Importing chat.json" in window.statusBar().currentMessage(), timeout=10_000)
    finally:
        release.set()
    qtbot.waitUntil(lambda: operation.settled, timeout=30_000)
    assert threads and threads[0] is not threading.main_thread()
    [chat] = done[0].conversations
    assert window.session.conversation is chat and len(chat.turns) == 200
    assert "Imported 1 conversation(s)" in window.statusBar().currentMessage()
    [stored] = [c for c in HistoryStore().conversations() if c.title == "long"]
    assert [t.user for t in stored.turns] == [f"q{n}" for n in range(200)]
