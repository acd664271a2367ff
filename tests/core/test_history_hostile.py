"""Data files in hostile states, on real files and real processes: a history another process holds locked,
a history and a settings file from a newer Nalar, a second Nalar, and who may read the files.
Nothing is moved or overwritten unless SQLite itself calls the file corrupt."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import SCHEMA_VERSION, HistoryStore, history_path
from app.core.settings import paths
from app.core.settings.instance_lock import InstanceLock
from app.core.settings.paths import DataUnavailable
from app.core.settings.settings import Settings, load_settings, save_settings, settings_path

HOLD_EXCLUSIVE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.readline()  # until the test says so
db.execute("COMMIT")
"""


def saved_history() -> Path:
    """A history with one finished conversation, closed."""
    store = HistoryStore()
    conversation = Conversation(title="kept")
    turn = Turn(user="What is 2+3?")
    conversation.turns.append(turn)
    store.start_turn(conversation, turn)
    turn.answer, turn.finish_reason = "5", "stop"
    store.finish_turn(turn)
    store.close()
    return history_path()


@pytest.fixture
def held_exclusive() -> Iterator[subprocess.Popen[str]]:
    """A second real process holding BEGIN EXCLUSIVE on the saved history until the test ends."""
    path = saved_history()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield holder
    if holder.poll() is None:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait(30)


def test_a_locked_history_is_reported_and_never_moved_aside(held_exclusive: subprocess.Popen[str]) -> None:
    """Bug caught: any sqlite3.DatabaseError, "database is locked" included, moved the history aside as corrupt
    and started an empty one, so a second process holding BEGIN EXCLUSIVE for a few seconds lost every
    conversation from view."""
    path = history_path()
    before = sorted(p.name for p in path.parent.iterdir())
    with pytest.raises(DataUnavailable) as refused:
        HistoryStore(busy_timeout_s=0.5)
    assert "locked" in refused.value.problem and "Another program" in refused.value.fix
    assert sorted(p.name for p in path.parent.iterdir()) == before, "nothing moved aside"
    held_exclusive.stdin.close()  # type: ignore[union-attr]
    held_exclusive.wait(30)
    store = HistoryStore()
    assert [c.title for c in store.conversations()] == ["kept"] and store.notice is None


def test_a_lock_released_within_the_wait_is_waited_out(held_exclusive: subprocess.Popen[str]) -> None:
    """Bug caught: a history busy for a moment (another process's write) was treated as unreadable at once."""
    held_exclusive.stdin.write("\n")  # type: ignore[union-attr]
    held_exclusive.stdin.flush()  # type: ignore[union-attr]
    store = HistoryStore(busy_timeout_s=30)  # SQLite retries until the holder commits
    assert [c.title for c in store.conversations()] == ["kept"]


def test_a_history_from_a_newer_nalar_is_refused_and_left_untouched() -> None:
    """Bug caught: migration wrote user_version=6 over a newer version (breaking that newer Nalar's file), and
    a newer file was never refused."""
    path = saved_history()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    before = path.read_bytes()
    with pytest.raises(DataUnavailable) as refused:
        HistoryStore()
    assert f"schema {SCHEMA_VERSION + 3}" in refused.value.problem and "untouched" in refused.value.fix
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 3
    assert path.read_bytes() == before
    assert not list(path.parent.glob("*.corrupt-*"))


def test_a_settings_file_from_a_newer_nalar_is_refused_and_left_untouched() -> None:
    """Bug caught: a settings file of a newer schema_version was moved aside as "corrupt" and defaults loaded."""
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    content = json.dumps({"schema_version": 99, "a_newer_field": True})
    path.write_text(content)
    with pytest.raises(DataUnavailable) as refused:
        load_settings()
    assert "schema 99" in refused.value.problem and "untouched" in refused.value.fix
    assert path.read_text() == content and not list(path.parent.glob("*.corrupt-*"))


def test_a_file_sqlite_calls_corrupt_is_still_moved_aside() -> None:
    """Bug caught: narrowing the move-aside to SQLite's corrupt codes could miss a file that is no database."""
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a database" * 200)
    store = HistoryStore()
    assert store.notice is not None and len(list(path.parent.glob("history.sqlite3.corrupt-*"))) == 1


HOLD_INSTANCE = """
import sys
from app.core.settings.instance_lock import InstanceLock
lock = InstanceLock()
print("held" if lock.acquire() else f"refused {lock.holder}", flush=True)
sys.stdin.readline()
"""


def test_a_second_nalar_finds_the_first_and_names_it(tmp_path: Path) -> None:
    """Bug caught: there was no single-instance lock, so two windows wrote the same history."""
    first = subprocess.Popen([sys.executable, "-c", HOLD_INSTANCE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "held"
        second = InstanceLock()
        assert not second.acquire()
        assert second.holder == first.pid and str(first.pid) in second.already_running()
    finally:
        first.stdin.close()  # type: ignore[union-attr]
        first.wait(30)
    again = InstanceLock()
    assert again.acquire(), "the lock ends with its process"
    again.release()


def test_data_folders_and_files_are_the_users_alone() -> None:
    """Bug caught: settings.json, history.sqlite3 and their folders were created 0644/0755 (others could read
    every conversation)."""
    save_settings(Settings())
    store = HistoryStore()
    store.close()
    for folder in (settings_path().parent, history_path().parent):
        assert stat.S_IMODE(folder.stat().st_mode) == paths.PRIVATE_DIR, folder
    for file in (settings_path(), history_path()):
        assert stat.S_IMODE(file.stat().st_mode) == paths.PRIVATE_FILE, file


def damage(path: Path, table: str) -> None:
    """Overwrite the first page of ``table`` (its root) with bytes no b-tree page has."""
    with sqlite3.connect(path) as db:
        size = db.execute("PRAGMA page_size").fetchone()[0]
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    db.close()
    with path.open("r+b") as file:
        file.seek((root - 1) * size)
        file.write(b"\xff" * size)


@pytest.mark.parametrize("big", [False, True])
def test_a_damaged_page_is_found_at_open_in_the_whole_of_a_small_file_and_in_the_list_of_a_big_one(
        big: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bugs caught: a 226 MiB history's quick_check reading every page before the window shows (0.5-5 s); a big
    file's damaged list (the one table read at start-up) no longer moved aside; a small file's damaged turns
    no longer found at open."""
    store = HistoryStore()
    store.add_conversations([Conversation(title="t", turns=[Turn("q", answer="a", finish_reason="stop")])])
    store.close()
    damage(history_path(), "conversations" if big else "messages")
    monkeypatch.setattr("app.core.chat.history.FULL_CHECK_MAX_BYTES", 0 if big else 2**30)
    store = HistoryStore()
    assert store.notice is not None and len(list(history_path().parent.glob("history.sqlite3.corrupt-*"))) == 1
