"""The window keeps conversations in the history database, while replies stream and across restarts."""

from __future__ import annotations

import asyncio
import json

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore
from app.core.chat.history_import import Imported, export_json
from app.engine.scripted import Script, ScriptedEngineDouble


def test_replies_are_saved_while_streaming_and_when_finished(qtbot, make_window, monkeypatch) -> None:
    # a partial save every 0.1 s (1 s in the app), so a one-second reply shows one while it streams
    monkeypatch.setattr("app.ui.controllers.chat_session.PARTIAL_SAVE_MS", 100)
    slow = Script(["<think>", *[f"step {i} " for i in range(30)], "</think>", *[f"word{i} " for i in range(30)]],
                  tokens_per_second=60)
    window = make_window(ScriptedEngineDouble([slow]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    window.prompt.setPlainText("count for me")
    window.controls.send_button.click()
    store = HistoryStore()  # a second connection, as another process would read the file
    qtbot.waitUntil(lambda: window.session.streaming, timeout=5_000)
    turn = window.session.conversation.turns[-1]
    qtbot.waitUntil(lambda: store.message_row(turn.message_id).get("thinking_text", "").startswith("step 0"),
                    timeout=5_000)
    assert store.message_row(turn.message_id)["finish_reason"] is None
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        pass
    row = store.message_row(turn.message_id)
    assert row["finish_reason"] == "stop" and row["answer_text"].startswith("word0 ")
    assert row["thinking_tokens"] > 0 and row["model"] == "scripted-double" and row["kv_cache_dtype"] == "auto"


def test_conversations_come_back_after_a_restart(qtbot, make_window) -> None:
    first = make_window(ScriptedEngineDouble([Script(["<think>t</think>five"])]))
    qtbot.waitUntil(first.controls.send_button.isEnabled, timeout=5_000)
    with qtbot.waitSignal(first.reply_finished, timeout=10_000):
        first.send("2+3?")
    first.conversation_list.new_button.click()
    first.close()
    second = make_window(ScriptedEngineDouble())
    assert [c.title for c in second.session.store.model] == ["2+3?", "New conversation"]
    second.conversation_list.select(0)
    assert second.chat_view.answer_pane.text() == "five" and "t" == second.chat_view.thinking_pane.text()


def test_an_interrupted_reply_is_shown_with_a_notice(qtbot, make_window) -> None:
    store = HistoryStore()
    conversation = Conversation(title="cut off")
    conversation.turns.append(Turn(user="long question"))
    store.start_turn(conversation, conversation.turns[0])
    store.save_partial(conversation.turns[0], "partial thought", "partial answ")
    store.close()
    window = make_window(ScriptedEngineDouble(), start=False)
    assert window.chat_view.answer_pane.text() == "partial answ"
    assert window.notice_label.isVisible() and "interrupted" in window.notice_label.text()
    assert window.session.conversation.turns[0].finish_reason == "interrupted"


def test_export_writes_markdown_and_json(qtbot, make_window, tmp_path) -> None:
    window = make_window(ScriptedEngineDouble([Script(["<think>add</think>**5**"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        window.send("2+3?")
    markdown = window.dialogs.export_conversation("md", str(tmp_path / "chat.md")).read_text()
    assert "## You\n\n2+3?" in markdown and "**5**" in markdown
    data = json.loads(window.dialogs.export_conversation("json", str(tmp_path / "chat.json")).read_text())
    assert data["messages"][0]["answer"] == "**5**" and data["messages"][0]["thinking"] == "add"


def test_a_corrupted_history_file_is_reported(qtbot, make_window) -> None:
    from app.core.chat.history import history_path

    history_path().parent.mkdir(parents=True, exist_ok=True)
    history_path().write_bytes(b"garbage" * 500)
    window = make_window(ScriptedEngineDouble(), start=False)
    assert window.banner.isVisible() and "history.sqlite3.corrupt-" in window.banner.text()


def test_regenerate_keeps_both_replies_and_an_edit_branches(qtbot, make_window) -> None:
    """On a real SQLite file, through the window. Bugs caught: Regenerate overwriting the old reply (issue 34:
    it becomes a sibling); an edit sending the old question, or the model reading the other branch's turns;
    switching back not showing the old reply in the panes; the shown branch not kept across a restart."""
    window = make_window(ScriptedEngineDouble([Script(["<think>t1</think>first"]), Script(["<think>t2</think>second"]),
                                               Script(["<think>t3</think>edited"])]))
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=5_000)
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        window.send("2+3?")
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        window.controls.regenerate_button.click()
    conversation = window.session.conversation
    assert [t.answer for t in conversation.tree] == ["first", "second"] and conversation.siblings(0) == (1, 2)
    assert window.chat_view.answer_pane.text() == "second"
    store = window.session.store
    assert store.switch_branch(0, -1) and window.chat_view.answer_pane.text() == "first"
    with qtbot.waitSignal(window.reply_finished, timeout=10_000):
        asyncio.ensure_future(window.session.send("2+4?", edit_at=0))
    assert [t.user for t in conversation.turns] == ["2+4?"] and conversation.siblings(0) == (2, 3)
    assert window.chat_view.answer_pane.text() == "edited"
    assert store.switch_branch(0, -3) is False and store.switch_branch(0, -1)
    window.close()
    [loaded] = HistoryStore().conversations()
    assert [t.answer for t in loaded.tree] == ["first", "second", "edited"] and loaded.turns[0].answer == "second"


def test_import_action_lists_and_shows_the_chat_and_a_bad_file_is_named(qtbot, make_window, tmp_path) -> None:
    """Through the File menu's action (declared in actions.py). Bugs caught: an import not listed until a
    restart; the imported branch not the one shown; a bad file's problem not shown, or a chat added anyway."""
    from app.ui.actions import BY_ID

    assert BY_ID["import_conversations"].menu == "File"
    window = make_window(ScriptedEngineDouble(), start=False)
    source = Conversation(title="From elsewhere", turns=[Turn(user="q1", answer="a1", finish_reason="stop")])
    source.branch_at(0, "q1 edited").answer = "a1 edited"
    good = tmp_path / "chat.json"
    good.write_text(export_json(source), encoding="utf-8")
    done: list[Imported] = []
    operation = window.dialogs.import_conversations(str(good)).success(done.append)
    qtbot.waitUntil(lambda: operation.settled, timeout=10_000)
    [imported] = done[0].conversations
    assert window.session.conversation is imported and window.chat_view.answer_pane.text() == "a1 edited"
    assert imported.siblings(0) == (1, 2) and window.conversation_list.count() == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"messages": "no"}')
    operation = window.dialogs.import_conversations(str(bad))
    qtbot.waitUntil(lambda: operation.settled, timeout=10_000)
    assert window.banner.isVisible() and 'no "messages" list' in window.banner.text()
    assert window.conversation_list.count() == 2 and len(HistoryStore().conversations()) == 2


def test_the_note_of_a_system_message_left_out_of_an_import_shows(qtbot, make_window, tmp_path) -> None:
    """Bug caught (planted): the note that a system message after the first question was not imported never
    reaching the window, so the user could not know part of the file was left out."""
    window = make_window(ScriptedEngineDouble(), start=False)
    file = tmp_path / "messages.json"
    file.write_text(json.dumps([{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                                {"role": "system", "content": "Answer in French."},
                                {"role": "user", "content": "q2"}]))
    operation = window.dialogs.import_conversations(str(file))
    qtbot.waitUntil(lambda: operation.settled, timeout=10_000)
    assert window.session.conversation.settings is None
    assert window.notice_label.isVisible() and "1 system message(s) after the first question not imported" in \
        window.notice_label.text()
