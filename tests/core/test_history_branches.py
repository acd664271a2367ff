"""Conversations as trees on a real SQLite file: the schema-6 migration, branches, fork, delete, and a
partial reply on a second branch surviving a kill -9 of the process writing it."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore, history_path
from app.core.chat.history_schema import SCHEMA_VERSION
from app.core.settings.paths import DataUnavailable
from tests.support.history_v6 import CONVERSATIONS, MESSAGE_COLUMNS, MESSAGES, TOOL_ROUNDS, write_schema_6

ROOT = Path(__file__).resolve().parents[2]


def rows(path: Path, sql: str) -> list[dict]:
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute(sql)]


def test_a_schema_6_history_migrates_with_every_field_of_every_turn() -> None:
    """Bugs caught: the table rebuild (needed to drop UNIQUE (conversation_id, position)) losing a column, a
    row, an id or non-ASCII text; a linear chat not becoming one branch (wrong parents, wrong leaf); the
    still-streaming row not marked interrupted after the rebuild; tool rounds no longer parsed."""
    path = history_path()
    write_schema_6(path)
    store = HistoryStore()
    assert store.interrupted == 1 and store.notice is None
    assert rows(path, "PRAGMA user_version")[0]["user_version"] == SCHEMA_VERSION
    migrated = {row["id"]: row for row in rows(path, "SELECT * FROM messages")}
    assert sorted(migrated) == [m[0] for m in MESSAGES]
    for before in MESSAGES:
        row = migrated[before[0]]
        expected = dict(zip(MESSAGE_COLUMNS, before, strict=True))
        if expected["finish_reason"] is None:  # the schema-6 process died mid-reply
            expected["finish_reason"] = "interrupted"
            row.pop("updated_at"), expected.pop("updated_at")
        assert {column: row[column] for column in expected} == expected
    assert [migrated[i]["parent_id"] for i in (1, 2, 3, 4, 7)] == [None, 1, 2, None, 4]
    conversations = {row["id"]: row for row in rows(path, "SELECT * FROM conversations")}
    assert {cid: row["leaf_id"] for cid, row in conversations.items()} == {"c-one": 3, "c-two": 7, "c-empty": None}
    for cid, title, thinking, tools, created in CONVERSATIONS:
        assert (conversations[cid]["title"], conversations[cid]["thinking"], conversations[cid]["tools"],
                conversations[cid]["created_at"], conversations[cid]["updated_at"]) == (
                    title, thinking, tools, created, created + 50)
    one, two, empty = store.conversations()
    assert [t.message_id for t in one.turns] == [1, 2, 3] and one.tree == one.turns and empty.turns == []
    assert [c.to_json() for c in one.turns[1].tool_rounds] == TOOL_ROUNDS
    assert (one.turns[2].backend, one.turns[2].loop_guard, one.turns[2].ttft_s) == (
        "office GPU", "thinking: 3 copies of a 5-token span; cut", None)
    assert [t.finish_reason for t in two.turns] == ["interrupted", "interrupted"] and two.thinking is False
    assert [one.siblings(i) for i in range(3)] == [(0, 1)] * 3
    store.close()
    assert HistoryStore().interrupted == 0, "a second open migrates nothing and marks nothing"


def test_a_newer_schema_is_refused_before_any_migration_and_never_rewritten() -> None:
    """Bug caught: the new migration step (which rebuilds a table) running on a file from a newer Nalar."""
    path = history_path()
    write_schema_6(path)
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    with pytest.raises(DataUnavailable) as refused:
        HistoryStore()
    assert f"schema {SCHEMA_VERSION + 1}" in refused.value.problem and "untouched" in refused.value.fix
    assert path.read_bytes() == before and sorted(p.name for p in path.parent.iterdir()) == ["history.sqlite3"]


def test_a_failed_migration_leaves_the_schema_6_file_as_it_was(monkeypatch) -> None:
    """Bug caught: a migration step failing half way (here: after the table was rebuilt) leaving a file that is
    neither schema 6 nor 7; the whole step runs in one transaction."""
    from app.core.chat import history_schema

    write_schema_6(history_path())
    real = history_schema.MIGRATIONS[6]

    def fails_after_the_rebuild(db: sqlite3.Connection) -> None:
        real(db)
        raise sqlite3.OperationalError("disk I/O error (injected)")

    monkeypatch.setitem(history_schema.MIGRATIONS, 6, fails_after_the_rebuild)
    with pytest.raises(DataUnavailable):
        HistoryStore()
    assert rows(history_path(), "PRAGMA user_version")[0]["user_version"] == 6
    assert "parent_id" not in {r["name"] for r in rows(history_path(), "PRAGMA table_info(messages)")}
    assert len(rows(history_path(), "SELECT * FROM messages")) == len(MESSAGES)


def answered(conversation: Conversation, store: HistoryStore, turn: Turn, answer: str) -> Turn:
    store.start_turn(conversation, turn)
    turn.answer, turn.finish_reason = answer, "stop"
    store.finish_turn(turn)
    return turn


def three_turn_chat(store: HistoryStore) -> Conversation:
    conversation = Conversation(title="tree")
    for n in range(3):
        answered(conversation, store, conversation.add_turn(Turn(user=f"q{n}")), f"a{n}")
    return conversation


def test_edit_and_regenerate_make_siblings_and_the_shown_branch_comes_back() -> None:
    """Bugs caught: an edit replacing the old question; the model reading turns of another branch; a restart
    showing the newest row instead of the branch the user left shown; siblings counted across depths."""
    store = HistoryStore()
    conversation = three_turn_chat(store)
    edited = answered(conversation, store, conversation.branch_at(1, "q1 edited"), "a1 edited")
    assert [t.user for t in conversation.turns] == ["q0", "q1 edited"] and conversation.siblings(1) == (1, 2)
    assert [m["content"] for m in conversation.messages()] == ["q0", "a0", "q1 edited"]
    regenerated = answered(conversation, store, conversation.branch_at(1), "a1 again")
    assert regenerated.user == "q1 edited" and conversation.siblings(1) == (2, 3)
    assert conversation.switch_branch(1, -1) and conversation.turns[1] is edited
    assert conversation.switch_branch(1, -1) and [t.user for t in conversation.turns] == ["q0", "q1", "q2"]
    assert not conversation.switch_branch(1, -1), "the first try has none before it"
    store.set_leaf(conversation)
    store.close()
    [loaded] = HistoryStore().conversations()
    assert [t.answer for t in loaded.turns] == ["a0", "a1", "a2"] and len(loaded.tree) == 5
    assert loaded.siblings(1) == (0, 3) and loaded.siblings(2) == (0, 1)
    assert loaded.switch_branch(1, +3) is False and loaded.switch_branch(1, +1)
    assert [t.answer for t in loaded.turns] == ["a0", "a1 edited"]


def test_deleting_a_branch_deletes_only_that_branch() -> None:
    """Bugs caught: deleting a try deleting its siblings, or leaving its descendants' rows behind (orphans a
    search would still find); the conversation left showing a deleted turn."""
    store = HistoryStore()
    conversation = three_turn_chat(store)
    answered(conversation, store, conversation.branch_at(1, "other"), "other answer")
    conversation.switch_branch(1, -1)  # back on q0, q1, q2
    gone = conversation.delete_branch(1)
    store.delete_turns(gone[0], conversation)
    assert [t.user for t in gone] == ["q1", "q2"]
    assert [t.user for t in conversation.turns] == ["q0", "other"] and conversation.siblings(1) == (0, 1)
    [loaded] = HistoryStore().conversations()
    assert [t.user for t in loaded.tree] == ["q0", "other"] and loaded.turns[-1].answer == "other answer"
    assert [r["user_text"] for r in rows(history_path(), "SELECT user_text FROM messages ORDER BY id")] == [
        "q0", "other"]
    conversation.delete_branch(0)
    store.delete_turns(conversation.tree[0] if conversation.tree else gone[0], conversation)
    assert conversation.turns == [] and conversation.leaf is None


def test_fork_copies_the_branch_with_every_field_into_a_new_chat() -> None:
    """Bugs caught: a fork sharing rows (or Turn objects) with its source, so a reply in one changes the
    other; the fork losing tool rounds, figures or the backend; a fork of the whole tree instead of the branch."""
    store = HistoryStore()
    source = three_turn_chat(store)
    source.turns[1].tool_rounds.append(Turn.__annotations__ and __import__(
        "app.core.chat.conversation", fromlist=["ToolRound"]).ToolRound.from_json(TOOL_ROUNDS[0]))
    source.turns[1].backend, source.turns[1].ttft_s = "office GPU", 0.3
    store.finish_turn(source.turns[1])
    answered(source, store, source.branch_at(2, "sibling"), "not forked")
    source.switch_branch(2, -1)
    fork = source.fork(1)
    store.add_conversations([fork])
    fork.turns[1].tool_rounds[0].calls[0].result = "changed in the fork only"
    [_, loaded_fork] = HistoryStore().conversations()
    assert loaded_fork.title == "tree (fork)" and [t.user for t in loaded_fork.tree] == ["q0", "q1"]
    assert loaded_fork.turns[1].backend == "office GPU" and loaded_fork.turns[1].ttft_s == 0.3
    assert [r.to_json() for r in loaded_fork.turns[1].tool_rounds] == TOOL_ROUNDS
    assert source.turns[1].tool_rounds[0].calls[0].result == "42"
    assert {t.message_id for t in loaded_fork.tree}.isdisjoint(t.message_id for t in source.tree)


SECOND_BRANCH_WRITER = """
import sys, time
from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
store = HistoryStore()
conversation = store.conversations()[0]
turn = conversation.branch_at(0, "the edited question")
store.start_turn(conversation, turn)
for n in range(100000):  # as ChatSession.save_partial does every second while a reply streams
    store.save_partial(turn, "thinking " * (n + 1), "answer " * n)
    if n == 3:
        store.flush()  # written on the store's own thread: in the file before the kill
        print(turn.message_id, flush=True)
    time.sleep(0.01)  # ok-sleep: a pace for the writer, not a wait for a condition
"""


def test_a_kill_9_mid_reply_on_a_second_branch_keeps_the_partial_on_that_branch() -> None:
    """A real process writing a reply on the second branch of a chat is SIGKILLed. Bugs caught: the partial
    row written under the first branch (wrong parent) or replacing its answer; the conversation reopening on
    the first branch, hiding the cut-off reply; the partial not marked interrupted."""
    store = HistoryStore()
    conversation = Conversation(title="kill -9")
    answered(conversation, store, conversation.add_turn(Turn(user="the first question")), "the first answer")
    store.close()
    writer = subprocess.Popen([sys.executable, "-c", SECOND_BRANCH_WRITER], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout is not None
        partial_id = int(writer.stdout.readline())
        writer.send_signal(signal.SIGKILL)
        assert writer.wait(30) == -signal.SIGKILL
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(30)
    reopened = HistoryStore()
    assert reopened.interrupted == 1
    [loaded] = reopened.conversations()
    [first, second] = loaded.tree
    assert (first.user, first.answer, first.finish_reason) == ("the first question", "the first answer", "stop")
    assert second.message_id == partial_id and second.parent is None and loaded.turns == [second]
    assert second.user == "the edited question" and second.finish_reason == "interrupted"
    assert second.thinking.startswith("thinking thinking thinking thinking") and loaded.siblings(0) == (1, 2)


def test_export_json_is_valid_after_branching() -> None:
    """Bug caught: the JSON export of a branched chat mixing branches (it exports the shown branch)."""
    from app.core.chat.history_import import export_json

    store = HistoryStore()
    conversation = three_turn_chat(store)
    answered(conversation, store, conversation.branch_at(1, "b"), "B")
    data = json.loads(export_json(conversation))
    assert [m["user"] for m in data["messages"]] == ["q0", "b"]


def columns(path: Path, table: str) -> list[tuple]:
    return [(row["name"], row["type"], row["notnull"], row["dflt_value"])
            for row in rows(path, f"PRAGMA table_info({table})")]


def test_schema_9_columns_come_the_same_through_every_path(tmp_path) -> None:
    """Bugs caught: the step to 9 adding a column that the step to 7 already made (a schema-6 file then fails
    to open with "duplicate column"); a migrated file whose columns differ from a new one's (a later
    INSERT ... SELECT * between them breaks); a schema-8 file losing its turns or its search index on the step."""
    fresh = tmp_path / "fresh.sqlite3"
    with sqlite3.connect(fresh) as db:
        from app.core.chat.history_schema import create_or_migrate
        create_or_migrate(db)
    path = history_path()
    write_schema_6(path)
    HistoryStore().close()
    for table in ("conversations", "messages"):
        assert columns(path, table) == columns(fresh, table)
    assert {"chat_settings", "thinking_edits", "keep_thinking"} <= {
        c[0] for t in ("conversations", "messages") for c in columns(path, t)}
    with sqlite3.connect(path) as db:  # back to a schema-8 file, with its turns and index
        for table, column in (("conversations", "chat_settings"), ("messages", "thinking_edits"),
                              ("messages", "keep_thinking"), ("messages", "knowledge")):  # knowledge: schema 12's
            db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        db.execute("DROP TABLE message_images")  # schema 11's
        db.execute("PRAGMA user_version = 8")
    store = HistoryStore()
    assert rows(path, "PRAGMA user_version")[0]["user_version"] == SCHEMA_VERSION == 12
    assert [t.message_id for t in store.conversations()[0].turns] == [1, 2, 3]
    assert rows(path, "SELECT thinking_edits, keep_thinking FROM messages WHERE id = 1") == [
        {"thinking_edits": "[]", "keep_thinking": 0}]
    store.close()
    for table in ("conversations", "messages"):
        assert columns(path, table) == columns(fresh, table)
