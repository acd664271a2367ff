"""Full-text search on a real SQLite file: FTS5 kept in step by triggers, bm25 order, marked snippets."""

from __future__ import annotations

import sqlite3

import pytest

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.history import HistoryStore, history_path
from app.core.chat.history_search import MARK_END, MARK_START, match_expression
from tests.support.history_v6 import write_schema_6


def chat(store: HistoryStore, title: str, *pairs: tuple[str, str, str]) -> Conversation:
    conversation = Conversation(title=title)
    for user, thinking, answer in pairs:
        turn = conversation.add_turn(Turn(user=user))
        store.start_turn(conversation, turn)
        turn.thinking, turn.answer, turn.finish_reason = thinking, answer, "stop"
        store.finish_turn(turn)
    return conversation


def index_is_sound(store: HistoryStore) -> None:
    """FTS5's own check that the index matches the rows it indexes (external content)."""
    with sqlite3.connect(store.path) as db:
        db.execute("INSERT INTO message_search (message_search, rank) VALUES ('integrity-check', 1)")
        db.execute("INSERT INTO title_search (title_search, rank) VALUES ('integrity-check', 1)")


def test_results_are_ranked_by_bm25_with_marked_snippets_and_thinking_behind_a_switch() -> None:
    """Bugs caught: results in insertion order instead of relevance; snippets without marks (nothing to
    highlight); thinking searched when the switch is off; a title match missed."""
    store = HistoryStore()
    chat(store, "Kettles", ("How long does a kettle take?", "", "A kettle takes about three minutes."))
    best = chat(store, "Tea", ("Kettle, kettle, kettle: which kettle?", "", "Any kettle."))
    chat(store, "Private", ("What did I think?", "the secret kettle thought", "Nothing."))
    hits = store.search("kettle")
    assert hits[0].message_id is None and hits[0].title == "Kettles", "the title first"
    turns = [h for h in hits if h.message_id is not None]
    assert turns[0].conversation_id == best.id and len(turns) == 2
    assert turns[0].rank <= turns[1].rank
    assert f"{MARK_START}Kettle{MARK_END}" in turns[0].snippet and turns[0].marked("[", "]").startswith("[Kettle]")
    with_thinking = store.search("secret", thinking=True)
    assert store.search("secret") == [] and [h.title for h in with_thinking] == ["Private"]
    index_is_sound(store)


def test_partial_saves_branches_and_deletes_keep_the_index_in_step() -> None:
    """Bugs caught: a streaming reply's words unsearchable until it ends (or a crash); words it no longer has
    still found; a deleted branch's or chat's text still found; a renamed chat found by its old title."""
    store = HistoryStore()
    conversation = chat(store, "Streams", ("first question", "", "plain"))
    turn = conversation.branch_at(0, "second question")
    store.start_turn(conversation, turn)
    store.save_partial(turn, "", "zebra crossing")
    assert [h.message_id for h in store.search("zebra")] == [turn.message_id]
    store.save_partial(turn, "", "giraffe now")
    assert store.search("zebra") == [] and len(store.search("giraffe")) == 1
    store.delete_turns(conversation.delete_branch(0)[0], conversation)
    assert store.search("giraffe") == [] and len(store.search("plain")) == 1
    conversation.title = "Renamed"
    store.save_conversation(conversation)
    assert store.search("Streams") == [] and store.search("renamed")[0].message_id is None
    store.delete_conversation(conversation.id)
    assert store.search("plain") == [] and store.search("renamed") == []
    index_is_sound(store)


def test_a_migrated_schema_6_history_is_searchable_at_once() -> None:
    """Bug caught: old databases getting an empty index (only new writes indexed). Also: accents and
    non-Latin text (remove_diacritics: "pourquoi" finds "Pourquoi", "diffusion" its accented forms)."""
    write_schema_6(history_path())
    store = HistoryStore()
    assert [h.message_id for h in store.search("pourquoi")][-1] == 1
    assert store.search("Rayleigh") == [] and store.search("rayleigh", thinking=True)[0].message_id == 1
    assert [h.message_id for h in store.search("repete")] == [3]  # "Répète"
    assert store.search("数学")[0].conversation_id == "c-two"
    index_is_sound(store)


@pytest.mark.parametrize("query", ['"', "kettle*", "a OR", "-x", "col:kettle", "NEAR(a b)", "(", "'; DROP"])
def test_any_typed_text_is_a_query_never_an_error(query: str) -> None:
    """Bug caught: FTS5 syntax in the user's words ("), unbalanced parentheses, a column filter) raising
    sqlite3.OperationalError out of the search box."""
    store = HistoryStore()
    chat(store, "t", ("kettle col a x", "", "b"))
    store.search(query)
    assert match_expression("  ") == "" and store.search("   ") == []


def test_a_common_word_ranks_its_newest_matches_and_a_prefix_is_expanded_only_when_few_match(monkeypatch) -> None:
    """Bugs caught: a word in most turns ranked over every row (FTS5's bm25 read its whole doclist: 0.5 s at
    200,000 turns) or, bounded, the oldest matches kept instead of the newest; the best of them not first; a word
    being typed ("kett") finding nothing because only whole words were tried; a cut match left unclosed."""
    monkeypatch.setattr("app.core.chat.history_search.CANDIDATES", 4)
    store = HistoryStore()
    old_best = chat(store, "a", ("kettle kettle kettle kettle", "", "kettle"))
    plain = [chat(store, f"c{n}", (f"the kettle number {n} of many words here", "", "ok")) for n in range(5)]
    best = chat(store, "b", ("kettle kettle", "", "a kettle"))
    turns = [h for h in store.search("kettle") if h.message_id is not None]
    assert old_best.id not in {h.conversation_id for h in turns}, "only the newest 4 are ranked"
    assert len(turns) == 4 and turns[0].conversation_id == best.id
    assert [h.rank for h in turns] == sorted(h.rank for h in turns)
    assert {h.conversation_id for h in turns[1:]} == {c.id for c in plain[2:]}
    typed = [h for h in store.search("kett") if h.message_id is not None]
    assert len(typed) == 4 and typed[0].conversation_id == best.id
    long = chat(store, "long", (" ".join(["filler"] * 30 + ["zebra"] + ["more"] * 30), "", "x"))
    [hit] = store.search("zebra")
    assert hit.conversation_id == long.id and hit.snippet.count(MARK_START) == hit.snippet.count(MARK_END) == 1
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…") and len(hit.snippet.split()) == 12
