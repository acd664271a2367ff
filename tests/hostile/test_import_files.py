"""Hostile files given to File → Import (and `nalar history import`), on a real SQLite file, no engine.

Each is refused with one ImportProblem that names the file and the item, and nothing of it is stored; a long
chat imports with work that grows with its turns, counted, never timed."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore, history_path
from app.core.chat.history_import import ImportProblem, read_import


def stored_chats() -> int:
    with sqlite3.connect(history_path()) as db:
        return int(db.execute("SELECT count(*) FROM conversations").fetchone()[0])


def import_into(store: HistoryStore, file: Path) -> list[Conversation]:
    """What the window and the command do: read and check the file, then store what it holds."""
    imported = read_import(file)
    store.add_conversations(imported.conversations)
    return imported.conversations


def refused(store: HistoryStore, file: Path) -> str:
    """The problem said about ``file``; the history holds what it held before."""
    before = stored_chats()
    with pytest.raises(ImportProblem) as problem:
        import_into(store, file)
    assert stored_chats() == before, "a refused file stored something"
    assert str(problem.value).startswith(file.name), f"the file is not named: {problem.value}"
    return str(problem.value)


@pytest.fixture
def store() -> HistoryStore:
    history = HistoryStore()
    history.add_conversations([Conversation(title="kept", turns=[Turn("q", answer="a", finish_reason="stop")])])
    return history


def one_turn(**fields: Any) -> dict[str, Any]:
    return {"title": "hostile", "messages": [{"user": "q", "answer": "a", **fields}]}


# ---- values of the wrong type or out of range ------------------------------------------------------------------

STEP = {"call_id": "c1", "name": "add", "arguments": "{}", "result": "42", "status": "ok"}
WRONG = {  # Nalar's own format: (the file's content, what the problem names)
    "a tool call whose name and result are numbers": (
        one_turn(tool_rounds=[{"thinking": "", "calls": [STEP | {"name": 2, "result": 4}]}]),
        'message 1, tool round 1, call 1: "name" is not text (2)'),
    "a tool call without arguments": (
        one_turn(tool_rounds=[{"calls": [{k: v for k, v in STEP.items() if k != "arguments"}]}]),
        'tool round 1, call 1 has no "arguments"'),
    "a tool round that is a string": (one_turn(tool_rounds=["add"]), "tool round 1 is not an object"),
    "a count as text": (one_turn(answer_tokens="many"), '"answer_tokens" is not a whole number'),
    "a count as true": (one_turn(thinking_tokens=True), '"thinking_tokens" is not a whole number'),
    "a negative count": (one_turn(answer_tokens=-1), '"answer_tokens" should be greater than or equal to 0'),
    "2**70 as a count": (one_turn(answer_tokens=2**70), '"answer_tokens" should be less than or equal to'),
    "a rate as text": (one_turn(tok_s="fast"), '"tok_s" is not a number'),
    "a finish reason as a number": (one_turn(finish_reason=7), '"finish_reason" is not text'),
    "a thinking edit's text as a number": (one_turn(thinking_edits=[{"original": 1, "edited": "x"}]),
                                           'thinking edit 1: "original" is not text'),
    "an image name as a list": (one_turn(images=[{"name": [], "url": "data:image/png;base64,"}]),
                                'image 1: "name" is not text'),
    "the Think switch as text": ({"thinking": "yes", "messages": []}, '"thinking" is not true or false'),
    "a shown index past the end": ({"messages": [{"user": "q"}], "tree": [{"user": "q"}], "shown": 3},
                                   '"shown" 3 is not'),
}


@pytest.mark.parametrize("kind", list(WRONG))
def test_a_value_of_the_wrong_type_or_range_is_refused_by_name(store: HistoryStore, tmp_path: Path, kind: str) -> None:
    """Bug caught: ``ToolStep(**call)`` and ``int()``/``str()``/``bool()`` took anything, so a tool round with
    ``name: 2, result: 4`` was stored and that chat could then not be shown, continued or exported; a count of
    2**70 reached SQLite (OverflowError, no banner)."""
    content, says = WRONG[kind]
    file = tmp_path / "wrong.json"
    file.write_text(json.dumps(content), encoding="utf-8")
    assert says in refused(store, file)


OPENAI_WRONG = {  # an OpenAI-style message list: (the messages, what the problem names)
    "tool_calls as a number": ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": 5}],
                               'message 2: "tool_calls" is not a list'),
    "a call id as a number": ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [
        {"id": 7, "type": "function", "function": {"name": "add", "arguments": "{}"}}]}],
        'message 2, tool call 1: "id" is not text'),
    "a text part that is a number": ([{"role": "user", "content": [{"type": "text", "text": 5}]}],
                                     'message 1: "content" is neither text nor'),
    "a tool_call_id as an object": ([{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": {}}],
                                    'message 2: "tool_call_id" is not text'),
}


@pytest.mark.parametrize("kind", list(OPENAI_WRONG))
def test_a_message_list_with_a_value_of_the_wrong_type_is_refused_by_name(store: HistoryStore, tmp_path: Path,
                                                                           kind: str) -> None:
    """Bug caught: ``tool_calls: 5`` raised an uncaught TypeError; a number as a call id or a text part was
    turned into text and stored."""
    messages, says = OPENAI_WRONG[kind]
    file = tmp_path / "messages.json"
    file.write_text(json.dumps(messages), encoding="utf-8")
    assert says in refused(store, file)


# ---- files that raised instead of the banner -----------------------------------------------------------------

UNCAUGHT = {  # the bytes of the file: (what the problem names); each raised an error no handler caught
    "100,000 open brackets (RecursionError)": (b"[" * 100_000, "is not JSON: recursion limit exceeded"),
    "Infinity as a count (OverflowError)": (b'{"messages": [{"user": "q", "thinking_tokens": Infinity}]}',
                                            '"thinking_tokens" is not a whole number'),
    "2**70 as a count (OverflowError in SQLite)": (
        b'{"messages": [{"user": "q", "answer_tokens": 1180591620717411303424}]}',
        '"answer_tokens" should be less than or equal to'),
    "NaN as a rate (IntegrityError)": (b'{"messages": [{"user": "q", "tok_s": NaN}]}',
                                       '"tok_s" is not a finite number'),
    "1e400 as seconds": (b'{"messages": [{"user": "q", "ttft_s": 1e400}]}', '"ttft_s" is not a finite number'),
    "a lone surrogate (UnicodeEncodeError)": (b'{"messages": [{"user": "\\ud800"}]}', "is not JSON: "),
    "a lone surrogate in a message list": (b'[{"role": "user", "content": "\\udfff"}]', "is not JSON: "),
}


@pytest.mark.parametrize("kind", list(UNCAUGHT))
def test_a_file_that_raised_an_uncaught_error_is_refused_by_name(store: HistoryStore, tmp_path: Path,
                                                                 kind: str) -> None:
    content, says = UNCAUGHT[kind]
    file = tmp_path / "hostile.json"
    file.write_bytes(content)
    assert says in refused(store, file)


def test_a_leading_byte_order_mark_is_read_past(store: HistoryStore, tmp_path: Path) -> None:
    """Bug caught: a file saved by an editor that writes a BOM was "not JSON"."""
    file = tmp_path / "bom.json"
    file.write_bytes(b"\xef\xbb\xbf" + json.dumps(one_turn()).encode())
    assert [c.title for c in import_into(store, file)] == ["hostile"]


def test_a_refused_second_chat_stores_nothing_of_the_first(store: HistoryStore, tmp_path: Path) -> None:
    """Bug caught: an ``--all`` export whose second chat is bad leaving the first one stored."""
    file = tmp_path / "all.json"
    file.write_text(json.dumps([one_turn(), one_turn(tok_s=float("inf"))]), encoding="utf-8")
    assert "conversation 2, message 1" in refused(store, file)
    assert [c.title for c in store.conversations()] == ["kept"]


def test_special_files_are_refused_without_reading_them(store: HistoryStore, tmp_path: Path) -> None:
    """A FIFO named chat.json blocked the read for ever (on the GUI thread); a link to /dev/zero was read until
    memory ran out. Bug caught: anything but a regular file opened and read to its end. The read runs on a
    thread with a generous hang guard, so a regression fails instead of hanging the suite."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for file in (fifo, zero):  # the FIFO first: if it is read, the check is gone and /dev/zero is not tried
        said: list[str] = []
        reader = threading.Thread(target=lambda f=file: said.append(refused(store, f)), daemon=True)
        reader.start()
        reader.join(60)
        if reader.is_alive():
            if file is fifo:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # lets the blocked read end
            pytest.fail(f"reading {file.name} did not return")
        assert said and "is not a regular file" in said[0]


# ---- a long chat: work that grows with its turns -------------------------------------------------------------

class CountedParent:
    """``Turn.parent`` with every read counted; past ``limit`` the test fails at once instead of waiting for
    a quadratic walk to end."""

    def __init__(self, limit: int) -> None:
        self.reads, self.limit = 0, limit

    def __get__(self, turn: Turn | None, owner: type) -> Any:
        if turn is None:
            return None
        self.reads += 1
        if self.reads > self.limit:
            pytest.fail(f"Turn.parent read more than {self.limit:,} times: a walk per turn (quadratic)")
        return turn.__dict__.get("parent")

    def __set__(self, turn: Turn, value: Turn | None) -> None:
        turn.__dict__["parent"] = value


TURNS = 16_000


@pytest.mark.parametrize("shown", ["the last turn", "the first turn"])
def test_a_16000_turn_chat_imports_with_work_linear_in_its_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  shown: str) -> None:
    """Bug caught: storing each turn walked to the root for its depth (``history._depth``), 16.7 s for a
    16,000-turn linear chat (234 KiB) on the GUI thread; a file showing its first turn made ``show`` walk the
    tree once per level. Counted, not timed: reads of ``Turn.parent`` and SQL statements per turn."""
    tree = [{"user": f"q{n}", "answer": f"a{n}", "parent": n - 1 if n else None} for n in range(TURNS)]
    file = tmp_path / "long.json"
    file.write_text(json.dumps({"title": "long", "messages": [], "tree": tree,
                                "shown": TURNS - 1 if shown == "the last turn" else 0}), encoding="utf-8")
    store = HistoryStore()
    statements: list[str] = []
    store._connection.set_trace_callback(statements.append)
    parent = CountedParent(limit=20 * TURNS)
    monkeypatch.setattr(Turn, "parent", parent)
    [chat] = import_into(store, file)
    assert len(chat.turns) == TURNS and chat.turns[-1].user == f"q{TURNS - 1}"
    ours = [statement for statement in statements if not statement.startswith("--")]  # not FTS5's own
    assert len(ours) <= 4 * TURNS, f"{len(ours):,} SQL statements for {TURNS:,} turns"
    [loaded] = store.conversations()
    assert len(loaded.turns) == TURNS and loaded.turns[-1].answer == f"a{TURNS - 1}"
    store.close()
    with sqlite3.connect(history_path()) as db:
        assert db.execute("SELECT max(position) FROM messages").fetchone()[0] == TURNS - 1
