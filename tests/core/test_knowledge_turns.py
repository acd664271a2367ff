"""A turn asked with knowledge passages (issue 51), below the window: what the model reads, what the history keeps
(schema 12), and which [n] of an answer become citations."""

from __future__ import annotations

import sqlite3

from app.core.chat.answer_markup import CITE_SCHEME, Collected, answer_html
from app.core.chat.conversation import Conversation, Source, Turn, TurnKnowledge
from app.core.chat.history import HistoryStore, history_path

SOURCES = (Source("notes", "/home/u/notes/a.md", None, 3, 9, "Glycerol boils at 290 °C."),
           Source("papers", "/home/u/papers/p.pdf", 4, None, None, "Table 2: boiling points."))
KNOWLEDGE = TurnKnowledge("2 passages, 40 tokens (BM25)", "[1] a.md …\n[2] p.pdf …", SOURCES, budget=900)


def test_only_the_question_being_answered_carries_its_passages_before_it() -> None:
    """Bugs caught: the passages after the question (the model reads the question, then text it wasn't asked
    about), or every earlier turn's passages sent again at each question (the context filled by old sources)."""
    conversation = Conversation(turns=[Turn("first?", answer="one [1]", knowledge=KNOWLEDGE),
                                       Turn("second?", knowledge=KNOWLEDGE)])
    users = [m["content"] for m in conversation.messages() if m["role"] == "user"]
    assert users == ["first?", f"{KNOWLEDGE.block}\n\nsecond?"]


def test_the_passages_are_kept_with_the_turn_and_read_back_whole(tmp_path) -> None:
    """Bugs caught: a reload losing the sources (the answer's [1] then points nowhere), a regenerate asking
    without them, a page or a line span read back as text, or a damaged cell losing the whole conversation."""
    store = HistoryStore()
    conversation = Conversation()
    turn = conversation.add_turn(Turn("q?", knowledge=KNOWLEDGE))
    store.start_turn(conversation, turn)
    again = conversation.branch_at(0)  # Regenerate: the same question with the same passages
    assert again.knowledge == KNOWLEDGE
    read = next(c for c in store.conversations() if c.id == conversation.id)
    assert read.tree[0].knowledge == KNOWLEDGE and read.tree[0].knowledge.sources[1].place == "page 4"
    assert SOURCES[0].place == "lines 3-9"
    store._db.execute("UPDATE messages SET knowledge = '{broken' WHERE id = ?", (turn.message_id,))
    damaged = next(c for c in store.conversations() if c.id == conversation.id)
    assert damaged.tree[0].knowledge is None and damaged.tree[0].user == "q?"
    store.close()


def test_a_schema_11_history_gets_the_knowledge_column_and_keeps_its_turns() -> None:
    """Bug caught: the step to 12 failing on a file whose messages table was rebuilt by the step to 7 (the
    column already there), or an older history refused."""
    store = HistoryStore()
    conversation = Conversation()
    store.start_turn(conversation, conversation.add_turn(Turn("old question")))
    store.close()
    with sqlite3.connect(history_path()) as db:
        db.execute("ALTER TABLE messages DROP COLUMN knowledge")
        db.execute("PRAGMA user_version = 11")
    reopened = HistoryStore()
    assert [t.user for t in reopened.conversations()[0].tree] == ["old question"]
    assert reopened.conversations()[0].tree[0].knowledge is None
    reopened.close()


def test_only_the_turns_own_citations_in_prose_become_links() -> None:
    """Bugs caught: [1] inside code made a link (``a[1]``), a number past the sources linked to nothing, an
    answer without sources getting links, or a link's own text turned into a nested link."""
    collected = Collected()
    rendered = answer_html("Boils at 290 [1], see [2, 7] and `a[1]` and [site](https://example.org/[1]).\n\n"
                           "```\nx[2]\n```", collected, citations=2)
    cites = [link.href for link in collected.links if link.href.startswith(CITE_SCHEME)]
    assert cites == [f"{CITE_SCHEME}:1", f"{CITE_SCHEME}:2"], collected.links
    assert "a[1]" in rendered and "x[2]" in rendered and ", 7]" in rendered
    plain = Collected()
    answer_html("Boils at 290 [1].", plain)
    assert plain.links == []


def test_an_export_and_its_import_keep_the_sources(tmp_path) -> None:
    """Bug caught: an exported conversation coming back without its sources (its answers' [1] then lead nowhere),
    or an import refusing an export of a chat asked with knowledge."""
    from app.core.chat.history_import import export_json, read_import

    conversation = Conversation(title="Kettles")
    conversation.add_turn(Turn("q?", answer="a [1]", finish_reason="stop", knowledge=KNOWLEDGE))
    exported = tmp_path / "kettles.json"
    exported.write_text(export_json(conversation), encoding="utf-8")
    imported = read_import(exported).conversations[0]
    assert imported.turns[0].knowledge == KNOWLEDGE
