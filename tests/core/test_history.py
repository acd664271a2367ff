"""HistoryStore on a real SQLite file: persistence, crash recovery, corruption, export."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore, history_path
from app.core.chat.history_import import export_json, export_markdown


def conversation_with_turn(store: HistoryStore, user: str = "What is 2+3?") -> tuple[Conversation, Turn]:
    conversation = Conversation(title="Sums")
    turn = Turn(user=user, model="SmolLM2", kv_cache_dtype="auto")
    conversation.turns.append(turn)
    store.start_turn(conversation, turn)
    return conversation, turn


def test_file_lives_in_the_data_dir_in_wal_mode(isolated_dirs) -> None:
    store = HistoryStore()
    assert store.path == history_path() and store.path.is_relative_to(isolated_dirs)
    assert store.path.name == "history.sqlite3" and "xdg_data_home" in str(store.path)
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_finished_turns_round_trip() -> None:
    store = HistoryStore()
    conversation, turn = conversation_with_turn(store)
    turn.thinking, turn.answer, turn.finish_reason = "2 plus 3", "**5**", "stop"
    turn.thinking_tokens, turn.answer_tokens, turn.ttft_s, turn.answer_tok_s = 4, 2, 0.12, 17.5
    store.finish_turn(turn)
    store.close()
    [loaded] = HistoryStore().conversations()
    assert loaded.id == conversation.id and loaded.title == "Sums"
    assert loaded.turns[0].answer == "**5**" and loaded.turns[0].thinking == "2 plus 3"
    assert (loaded.turns[0].finish_reason, loaded.turns[0].ttft_s, loaded.turns[0].answer_tok_s) == ("stop", 0.12, 17.5)
    assert (loaded.turns[0].model, loaded.turns[0].kv_cache_dtype) == ("SmolLM2", "auto")


def test_a_reply_cut_off_by_a_crash_is_kept_and_marked_interrupted() -> None:
    store = HistoryStore()
    conversation, turn = conversation_with_turn(store)
    store.save_partial(turn, "thinking so far", "half an ans")
    store.close()  # no finish_turn: the process died
    reopened = HistoryStore()
    assert reopened.interrupted == 1
    [loaded] = reopened.conversations()
    assert loaded.turns[0].answer == "half an ans" and loaded.turns[0].finish_reason == "interrupted"
    assert HistoryStore().interrupted == 0, "marked once"


def test_a_partial_save_never_waits_for_the_file_and_never_lands_after_the_reply_ends() -> None:
    """Another connection holds the write lock (as a long FTS5 re-index of a 400 KB reply would). Bugs caught:
    the partial save written on the calling (GUI) thread, which then waits for the lock (10 s here, then an
    error); a read just after the save not seeing it; the queued partial landing after the reply's end and
    putting back the half answer."""
    store = HistoryStore()
    _, turn = conversation_with_turn(store)
    with sqlite3.connect(store.path, isolation_level=None) as other:
        other.execute("BEGIN IMMEDIATE")
        store.save_partial(turn, "thinking so far", "half an ans")  # returns while the file is locked
        other.execute("COMMIT")
    assert store.message_row(turn.message_id)["answer_text"] == "half an ans"
    with sqlite3.connect(store.path, isolation_level=None) as other:
        other.execute("BEGIN IMMEDIATE")
        store.save_partial(turn, "thinking", "half an answer")
        other.execute("COMMIT")
    turn.thinking, turn.answer, turn.finish_reason = "thinking", "the whole answer", "stop"
    store.finish_turn(turn)
    store.close()
    [loaded] = HistoryStore().conversations()
    assert loaded.turns[0].answer == "the whole answer" and loaded.turns[0].finish_reason == "stop"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="only Linux keeps a nice value per thread")
def test_partial_saves_are_written_below_the_callers_priority() -> None:
    """Bug caught: the writer thread's indexing (25 ms a save at 400 KB) competing with the GUI thread at its
    priority, lengthening a refresh's stall on a 2-core machine."""
    store = HistoryStore()
    _, turn = conversation_with_turn(store)
    earlier = set(threading.enumerate())  # another test's store, not closed, may not have ended its writer yet
    store.save_partial(turn, "", "some text")
    store.flush()
    [writer] = [t for t in threading.enumerate() if t.name.startswith("nalar-history") and t not in earlier]
    assert writer.native_id is not None
    assert os.getpriority(os.PRIO_PROCESS, writer.native_id) > os.getpriority(os.PRIO_PROCESS, 0)
    store.close()
    assert not writer.is_alive(), "close ends the writer thread"
    store.close()  # as a window closing twice does: nothing left to wait for, no error


def test_a_partial_save_that_fails_is_logged_and_the_next_one_is_written(caplog) -> None:
    """Bugs caught: a background save's error raised into the next, unrelated call (a search, the reply's end);
    the writer thread dead after one failure, so nothing more is saved while the reply streams."""
    store = HistoryStore(busy_timeout_s=0.05)
    _, turn = conversation_with_turn(store)
    with sqlite3.connect(store.path, isolation_level=None) as other:
        other.execute("BEGIN IMMEDIATE")
        store.save_partial(turn, "", "lost")
        store.flush()  # the save gave up on the lock
        other.execute("COMMIT")
    assert "partial save" in caplog.text and "locked" in caplog.text
    store.save_partial(turn, "", "kept")
    assert store.message_row(turn.message_id)["answer_text"] == "kept" and store.search("kept")


def test_replies_left_streaming_are_found_through_their_index_not_by_reading_every_row() -> None:
    """Bugs caught: start-up reading all 200,000 turns (0.15-0.25 s) to find the replies a dead Nalar left
    streaming; a reply reset to go on (Continue anyway) missing from that index; a schema 9 file without it."""
    store = HistoryStore()
    conversation, turn = conversation_with_turn(store)
    turn.finish_reason = "stop"
    store.finish_turn(turn)
    store.start_turn(conversation, turn)  # the same row reset: streaming again
    store.close()
    with sqlite3.connect(history_path()) as db:
        plan = " ".join(row[3] for row in db.execute(
            "EXPLAIN QUERY PLAN UPDATE messages SET finish_reason = 'interrupted' WHERE finish_reason IS NULL"))
        db.execute("DROP INDEX messages_streaming")
        db.execute("PRAGMA user_version = 9")
    db.close()
    assert "messages_streaming" in plan
    assert HistoryStore().interrupted == 1
    with sqlite3.connect(history_path()) as db:
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'messages_streaming'").fetchone()[0] == 1
    db.close()


def test_regenerate_keeps_the_old_reply_as_a_sibling_and_continue_resets_its_own_row() -> None:
    """Bugs caught: Regenerate overwriting the old reply's row (issue 34: both replies stay); a reply that goes
    on (Continue anyway keeps its ``message_id``) inserting a second row instead of resetting its own."""
    store = HistoryStore()
    conversation, turn = conversation_with_turn(store)
    turn.answer, turn.finish_reason = "first", "stop"
    store.finish_turn(turn)
    first_id = turn.message_id
    again = conversation.branch_at(0)
    store.start_turn(conversation, again)
    assert again.message_id != first_id and store.message_row(first_id)["answer_text"] == "first"
    assert store.message_row(again.message_id)["finish_reason"] is None
    store.save_partial(again, "", "kept so far")
    store.start_turn(conversation, again)  # the same reply going on
    assert store.message_row(again.message_id)["answer_text"] == ""
    assert len(store.conversations()[0].tree) == 2


def test_delete_cascades_to_messages() -> None:
    store = HistoryStore()
    conversation, turn = conversation_with_turn(store)
    store.delete_conversation(conversation.id)
    assert store.conversations() == [] and store.message_row(turn.message_id) == {}


def test_corrupted_file_is_moved_aside_and_a_fresh_one_starts() -> None:
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a database, just bytes that were once a history file" * 100)
    store = HistoryStore()
    backups = list(path.parent.glob("history.sqlite3.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_bytes().startswith(b"this is not a database")
    assert store.notice is not None and str(backups[0]) in store.notice
    conversation_with_turn(store)
    assert len(store.conversations()) == 1


def test_exports() -> None:
    conversation = Conversation(title="Sums", turns=[
        Turn(user="2+3?", thinking="add them", answer="**5**", finish_reason="stop"),
        Turn(user="and 4+4?", thinking="", answer="8 and then", finish_reason="interrupted")])
    markdown = export_markdown(conversation)
    assert markdown.startswith("# Sums") and "## You\n\n2+3?" in markdown and "**5**" in markdown
    assert "<details><summary>Thinking</summary>" in markdown and "## Nalar (interrupted)" in markdown
    data = json.loads(export_json(conversation))
    assert data["title"] == "Sums" and data["messages"][0]["thinking"] == "add them"
    assert data["messages"][1]["finish_reason"] == "interrupted"


def tool_turn(store: HistoryStore) -> tuple[Conversation, Turn]:
    from app.core.chat.conversation import ToolRound, ToolStep

    conversation, turn = conversation_with_turn(store, "What is 2+40?")
    conversation.tools = True
    turn.tool_rounds.append(ToolRound("I should add them.", [
        ToolStep("call-1", "add", '{"a": 2, "b": 40}', "demo", "42", "ok"),
        ToolStep("call-2", "slow", "{}", "demo", "", "pending")]))
    return conversation, turn


def test_tool_calls_and_results_survive_a_crash_and_a_restart() -> None:
    """Bug caught: calls kept only in memory (lost when Nalar dies mid-call), or the chat's Tools switch not
    stored, so a reopened chat would offer no tools."""
    store = HistoryStore()
    conversation, turn = tool_turn(store)
    store.save_conversation(conversation)
    store.save_tool_rounds(turn)
    store.close()  # no finish_turn: the process died while the second call waited for approval
    [loaded] = HistoryStore().conversations()
    assert loaded.tools is True
    [tool_round] = loaded.turns[0].tool_rounds
    assert tool_round.thinking == "I should add them."
    assert [(c.name, c.arguments, c.result, c.status) for c in tool_round.calls] == [
        ("add", '{"a": 2, "b": 40}', "42", "ok"), ("slow", "{}", "", "pending")]


def test_the_model_reads_back_each_call_and_its_result() -> None:
    """Bug caught: a follow-up request without the assistant's tool_calls or with a call left unanswered (chat
    templates and OpenAI servers refuse a tool_call with no tool message)."""
    store = HistoryStore()
    conversation, turn = tool_turn(store)
    messages = conversation.messages()
    assert messages[0] == {"role": "user", "content": "What is 2+40?"}
    assert messages[1]["role"] == "assistant"
    assert [c["function"]["name"] for c in messages[1]["tool_calls"]] == ["add", "slow"]
    assert messages[2] == {"role": "tool", "tool_call_id": "call-1", "content": "42"}
    assert messages[3]["tool_call_id"] == "call-2" and "did not run" in messages[3]["content"]
    turn.answer = "42"
    conversation.turns.append(Turn(user="thanks"))
    assert conversation.messages()[4:] == [{"role": "assistant", "content": "42"},
                                           {"role": "user", "content": "thanks"}]


def test_exports_keep_calls_and_results() -> None:
    """Bug caught: Export dropping the tool calls, so an exported chat's answer cites a result that isn't there."""
    store = HistoryStore()
    conversation, turn = tool_turn(store)
    markdown = export_markdown(conversation)
    assert "**Tool call** `add` (ok)" in markdown and '{"a": 2, "b": 40}' in markdown and "42" in markdown
    data = json.loads(export_json(conversation))
    assert data["messages"][0]["tool_rounds"][0]["calls"][0]["result"] == "42"


def test_a_schema_4_history_gains_the_tool_columns() -> None:
    """Bug caught: a history file from before tools failing to open (it would be moved aside as corrupt)."""
    from tests.support.history_v6 import write_schema_6

    write_schema_6(history_path())  # the schema-6 release's file, less what schemas 5 and 6 added
    db = sqlite3.connect(history_path())
    db.executescript("ALTER TABLE messages DROP COLUMN tool_rounds; ALTER TABLE conversations DROP COLUMN tools; "
                     "PRAGMA user_version = 4;")
    db.close()
    reopened = HistoryStore()
    assert reopened.notice is None
    loaded = reopened.conversations()
    assert [c.tools for c in loaded] == [False] * 3 and loaded[0].turns[1].tool_rounds == []
    assert [t.user for t in loaded[0].turns] == ["Pourquoi le ciel est-il bleu? 🌍", "Et 2+40?", "Répète"]
