"""The user's edits to a reply's thinking as data: where they begin, the pause's decisions, and how the
history, the exports and an import keep them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, ThinkingEdit, Turn
from app.core.chat.history import HistoryStore
from app.core.chat.history_import import ImportProblem, export_json, export_markdown, read_import
from app.core.chat.reply import Reply
from app.core.steering.thinking_pause import ThinkingPause


def test_an_edit_knows_where_the_user_began_and_what_they_wrote() -> None:
    """Bug caught: the mark put at the end of the thinking when the user changed a word in its middle."""
    added = ThinkingEdit("300 cm is 30 m", "300 cm is 30 m\nHint: check the units.")
    assert (added.at, added.inserted) == (14, "\nHint: check the units.")
    changed = ThinkingEdit("300 cm is 30 m, so", "300 cm is 3 m")
    assert (changed.at, changed.inserted) == (11, " m")
    cut = ThinkingEdit("a long detour", "a long")
    assert (cut.at, cut.inserted) == (6, "")
    assert ThinkingEdit.from_json(json.loads(json.dumps(changed.to_json()))) == changed


def turn(thinking: str, answer: str = "") -> Turn:
    return Turn(user="q", thinking=thinking, answer=answer)


def test_the_pause_takes_hold_only_over_a_reply_stopped_in_its_thinking() -> None:
    """Bug caught: a reply that finished by itself (or began its answer) between the press and the stop made
    the pane editable, and Resume then sent a thinking the model had already closed."""
    pause = ThinkingPause()
    states: list[str] = []
    pause.changed.connect(states.append)
    assert not pause.took_hold("abort", turn("t")), "no Pause was pressed: a plain Stop"
    pause.begin()
    assert not pause.took_hold("stop", turn("t")) and pause.state == "off"
    pause.begin()
    assert not pause.took_hold("abort", turn("t", "an answer began")) and pause.state == "off"
    pause.begin()
    assert pause.took_hold("abort", turn("so far")) and pause.paused and pause.original == "so far"
    assert pause.take_edit("so far") is None and pause.state == "off", "unchanged: resumed, no edit recorded"
    pause.begin()
    pause.took_hold("abort", turn("so far"))
    assert pause.take_edit("so far, hint") == ThinkingEdit("so far", "so far, hint") and pause.original == ""
    assert states == ["pausing", "off", "pausing", "off", "pausing", "paused", "off", "pausing", "paused", "off"]


def test_pause_applies_while_thinking_without_tool_rounds_on_an_engine_that_resumes() -> None:
    """Bug caught: Pause offered in the answer, after tool rounds (whose thinking the pane joins), or remote."""
    reply = Reply()
    assert not ThinkingPause.applies(reply, can_resume=True), "nothing streams"
    reply.begin("local")
    reply.add_thinking("hm")
    assert ThinkingPause.applies(reply, can_resume=True) and not ThinkingPause.applies(reply, can_resume=False)
    reply.add_answer("A")
    assert not ThinkingPause.applies(reply, can_resume=True)


def edited_conversation() -> Conversation:
    answered = Turn(user="How long is 300 cm?", thinking="300 cm is 30 m\nHint: check the units. So 3 m.",
                    answer="3 m.", finish_reason="stop",
                    thinking_edits=[ThinkingEdit("300 cm is 30 m", "300 cm is 30 m\nHint: check the units.")])
    return Conversation(title="units", turns=[answered])


def test_the_history_keeps_both_versions_and_a_damaged_cell_loses_only_the_marks(tmp_path: Path) -> None:
    """Bug caught: the edits not saved with the turn (or lost on reopening), or one unreadable cell making the
    whole history unreadable."""
    store = HistoryStore(tmp_path / "h.sqlite3")
    conversation = edited_conversation()
    store.add_conversations([conversation])
    assert store.conversations()[0].turns[0].thinking_edits == conversation.turns[0].thinking_edits
    store._db.execute("UPDATE messages SET thinking_edits = '{broken'")  # noqa: SLF001
    [reread] = store.conversations()
    assert reread.turns[0].thinking_edits == [] and reread.turns[0].answer == "3 m."
    store.close()


def test_exports_mark_the_edit_and_an_import_keeps_it(tmp_path: Path) -> None:
    """Bug caught: Export dropping the edit (the Markdown reads as if the model wrote the hint itself), or an
    import of Nalar's own JSON losing it."""
    conversation = edited_conversation()
    markdown = export_markdown(conversation)
    assert "✎ Thinking edited by the user (edit 1, from character 14)" in markdown
    assert "(nothing: the user added)" in markdown and "Hint: check the units." in markdown
    path = tmp_path / "c.json"
    path.write_text(export_json(conversation), encoding="utf-8")
    [imported] = read_import(path).conversations
    assert imported.turns[0].thinking_edits == conversation.turns[0].thinking_edits
    data = json.loads(export_json(conversation))
    data["messages"][0]["thinking_edits"] = ["not an edit"]
    data["tree"][0]["thinking_edits"] = ["not an edit"]
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ImportProblem, match="thinking edit"):
        read_import(path)
