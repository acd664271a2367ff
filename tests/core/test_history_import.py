"""Import on a real SQLite file: Nalar's own export round-trips with its branches; an OpenAI-style message
list becomes one chat; a bad file is named and nothing stored changes."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, ToolRound, Turn
from app.core.chat.history import HistoryStore, history_path
from app.core.chat.history_import import ImportProblem, export_json, export_markdown, read_import
from tests.support.history_v6 import TOOL_ROUNDS

COMPARED = [f.name for f in fields(Turn) if f.name not in ("message_id", "parent")]


def branched(store: HistoryStore) -> Conversation:
    """Three turns, a second try of the second (edited), tool rounds, a loop note, an interrupted turn."""
    conversation = Conversation(title="Ciel ☁️ 数学", thinking=False, tools=True)
    for n, (user, answer) in enumerate((("Pourquoi? 🌍", "Rayleigh"), ("2+40?", "42"), ("répète", "encore"))):
        turn = conversation.add_turn(Turn(user=user, model="SmolLM2", kv_cache_dtype="fp8_e4m3", backend="local"))
        store.start_turn(conversation, turn)
        turn.thinking, turn.answer, turn.finish_reason = f"pensée {n}", answer, "stop"
        turn.thinking_tokens, turn.answer_tokens, turn.ttft_s, turn.answer_tok_s = 10 + n, 3, 0.25, 17.5
        if n == 1:
            turn.tool_rounds = [ToolRound.from_json(TOOL_ROUNDS[0])]
        if n == 2:
            turn.loop_guard, turn.finish_reason = "thinking: 3 copies; cut", "loop"
        store.finish_turn(turn)
    other = conversation.branch_at(1, "2+41?")
    store.start_turn(conversation, other)
    store.save_partial(other, "half", "4")
    other.thinking, other.answer, other.finish_reason, other.backend = "half", "4", "interrupted", "office GPU"
    store.finish_turn(other)
    conversation.switch_branch(1, -1)
    store.set_leaf(conversation)
    return conversation


def same_tree(a: Conversation, b: Conversation) -> None:
    assert (a.title, a.thinking, a.tools, len(a.tree)) == (b.title, b.thinking, b.tools, len(b.tree))
    for x, y in zip(a.tree, b.tree, strict=True):
        assert {k: getattr(x, k) for k in COMPARED} == {k: getattr(y, k) for k in COMPARED}
        assert (a.tree.index(x.parent) if x.parent else None) == (b.tree.index(y.parent) if y.parent else None)
    assert [a.tree.index(t) for t in a.turns] == [b.tree.index(t) for t in b.turns]


def test_nalars_json_export_round_trips_with_every_branch(tmp_path: Path) -> None:
    """Bugs caught: export writing only the shown branch (an import would lose the others); the shown branch,
    a tool round, a figure, the backend or the interrupted mark lost; an import merging into the source chat."""
    store = HistoryStore()
    source = branched(store)
    file = tmp_path / "chat.json"
    file.write_text(export_json(source), encoding="utf-8")
    imported = read_import(file)
    store.add_conversations(imported.conversations)
    store.close()
    loaded_source, loaded_copy = HistoryStore().conversations()
    assert loaded_copy.id != source.id
    same_tree(source, loaded_copy)
    same_tree(loaded_source, loaded_copy)
    assert loaded_copy.siblings(1) == (0, 2) and loaded_copy.tree[3].finish_reason == "interrupted"


def test_an_all_export_imports_every_conversation(tmp_path: Path) -> None:
    store = HistoryStore()
    first, second = branched(store), Conversation(title="empty")
    file = tmp_path / "all.json"
    file.write_text(json.dumps([json.loads(export_json(c)) for c in (first, second)]), encoding="utf-8")
    assert [c.title for c in read_import(file).conversations] == ["Ciel ☁️ 数学", "empty"]


def test_an_openai_message_list_becomes_one_chat(tmp_path: Path) -> None:
    """Bugs caught: a message list refused, or its tool calls and results dropped (the answer then cites a
    result that isn't there); OpenAI's list-of-parts content refused; a system message silently lost (it is now
    the chat's system prompt, as a preset's would be)."""
    file = tmp_path / "messages.json"
    file.write_text(json.dumps([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is 2+40?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 40}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
        {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "You're welcome."}]))
    imported = read_import(file)
    [chat] = imported.conversations
    assert imported.notes == [] and chat.settings is not None and chat.settings.values.system_prompt == "Be brief."
    assert chat.title == "What is 2+40?" and [t.user for t in chat.turns] == ["What is 2+40?", "thanks"]
    [step] = chat.turns[0].tool_rounds[0].calls
    assert (step.name, step.arguments, step.result, step.status) == ("add", '{"a": 2, "b": 40}', "42", "ok")
    assert chat.turns[0].answer == "It is 42." and chat.messages()[-1] == {"role": "user", "content": "thanks"}


def test_a_system_message_after_the_first_question_is_not_the_chats_system_prompt(tmp_path: Path) -> None:
    """The decision: a Nalar chat has one system prompt, before its first question, so a system message that
    comes later in a message list is left out and a note says so. Bugs caught (planted): the later message
    made the whole chat's system prompt (every earlier answer was then given under a prompt it never had),
    or left out without the note."""
    file = tmp_path / "messages.json"
    file.write_text(json.dumps([
        {"role": "user", "content": "What is 2+40?"}, {"role": "assistant", "content": "42"},
        {"role": "system", "content": "From now on, answer in French."},
        {"role": "user", "content": "And 2+41?"}, {"role": "assistant", "content": "quarante-trois"}]))
    imported = read_import(file)
    [chat] = imported.conversations
    assert chat.settings is None, "the later system message became the chat's system prompt"
    assert [t.user for t in chat.turns] == ["What is 2+40?", "And 2+41?"]
    assert "French" not in json.dumps(chat.messages())
    assert imported.notes == ["1 system message(s) after the first question not imported: a Nalar chat has one "
                              "system prompt, before its first question."]
    first_then_later = json.loads(file.read_text())
    first_then_later.insert(0, {"role": "system", "content": "Be brief."})
    file.write_text(json.dumps(first_then_later))
    imported = read_import(file)
    assert imported.conversations[0].settings.values.system_prompt == "Be brief." and len(imported.notes) == 1


def test_markdown_export_of_a_branched_chat_holds_only_the_branch_shown() -> None:
    """The decision: Markdown is a transcript to read, so it holds the path shown, not every try (the JSON
    export keeps those). Bug caught (planted): exporting the tree, every edited question and regenerated reply
    one after another, read as a conversation that never happened; a test without branches could not see it."""
    chat = Conversation(title="tries")
    chat.add_turn(Turn("Q1-original", answer="A1-original", finish_reason="stop"))
    chat.add_turn(Turn("Q2-original", answer="A2-original", finish_reason="stop"))
    regenerated = chat.branch_at(1)  # Regenerate the second reply
    regenerated.answer, regenerated.finish_reason = "A2-regenerated", "stop"
    edited = chat.branch_at(0, "Q1-edited")  # the first question edited, and the talk went on from there
    edited.answer, edited.finish_reason = "A1-edited", "stop"
    chat.add_turn(Turn("Q3-after-the-edit", answer="A3-after-the-edit", finish_reason="stop"))
    every = ["Q1-original", "A1-original", "Q2-original", "A2-original", "A2-regenerated", "Q1-edited", "A1-edited",
             "Q3-after-the-edit", "A3-after-the-edit"]
    for shown, kept in ((regenerated, ["Q1-original", "A1-original", "Q2-original", "A2-regenerated"]),
                        (edited, ["Q1-edited", "A1-edited", "Q3-after-the-edit", "A3-after-the-edit"])):
        chat.show(shown)
        markdown = export_markdown(chat)
        found = [text for text in every if text in markdown]
        assert sorted(found, key=markdown.index) == kept, f"shown {shown.user}: exported {found}"
        assert markdown.count("## You") == len(chat.turns) == 2


BAD = {
    "not JSON": (b'{"messages": [', "is not JSON"),
    "not UTF-8": (b'\xff\xfe{"a": 1}', "not UTF-8"),
    "a number": (b"42", "neither a Nalar export"),
    "no messages": (b'{"title": "x"}', 'no "messages" list'),
    "a message without user text": (b'{"messages": [{"answer": "a"}]}', 'message 1 has no "user"'),
    "a bad parent": (b'{"tree": [{"user": "a", "parent": 5}], "messages": []}', '"parent" 5'),
    "a title that is no text": (b'{"title": 3, "messages": []}', '"title" is not text'),
    "an unknown role": (b'[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]', "'robot'"),
    "an answer before a question": (b'[{"role": "assistant", "content": "a"}]', "before any user message"),
    "a result for no call": (b'[{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "x", '
                             b'"content": "r"}]', "no call made before it"),
    "an image part": (b'[{"role": "user", "content": [{"type": "image_url"}]}]', "neither text nor"),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_a_bad_file_is_named_and_nothing_stored_changes(tmp_path: Path, kind: str) -> None:
    """Bugs caught: a traceback instead of the problem; a half-read file stored in part."""
    store = HistoryStore()
    branched(store)
    before = store.conversations()
    file = tmp_path / "bad.json"
    content, expected = BAD[kind]
    file.write_bytes(content)
    with pytest.raises(ImportProblem) as problem:
        read_import(file)
    assert expected in str(problem.value)
    with sqlite3.connect(history_path()) as db:
        assert db.execute("SELECT count(*) FROM conversations").fetchone()[0] == len(before)


def test_a_failing_store_keeps_none_of_a_multi_chat_import(tmp_path: Path) -> None:
    """Bug caught: a failure part way through an import (here a conversation id already stored, turned into a
    constraint failure) leaving the chats before it stored."""
    store = HistoryStore()
    good = Conversation(title="good", turns=[Turn(user="q", answer="a", finish_reason="stop")])
    broken = Conversation(title="broken", turns=[Turn(user="q", answer="a", finish_reason="stop")])
    broken.tree[0].user = None  # type: ignore[assignment]  # NOT NULL fails on the second chat's turn
    with pytest.raises(sqlite3.IntegrityError):
        store.add_conversations([good, broken])
    assert store.conversations() == [] and store.search("good") == []
